"""What an artifact is built for when a speculative method needs more than the plain model.

Why a module of its own, TVM-free: the compiler builds these variants, the runtime checks
an artifact is the variant it needs, and the entry point asks for them; all three name them
here once. EAGLE (runtime/speculative/eagle.py) needs the target's last hidden states of the
tokens it computes, so its target is built with one more function, HIDDEN_STATES_FUNCTION
(a plain build stays as it was, in content and cache key); the EAGLE head is a checkpoint of
its own, built as EAGLE_HEAD_ARCHITECTURE (model_defs/eagle.py) rather than as the
architecture its config names.
"""

from __future__ import annotations

EAGLE_TARGET = "eagle_target"
"""A target model that also exports HIDDEN_STATES_FUNCTION."""

EAGLE_HEAD = "eagle_head"
"""An EAGLE-1 head checkpoint (fc over [embedding, hidden state], decoder layers, no norm)."""

SPECULATIVE_ROLES = (EAGLE_TARGET, EAGLE_HEAD)

HIDDEN_STATES_FUNCTION = "prefill_hidden"
"""A ragged prefill that returns, next to the logits rows, the final-norm hidden states of
every token of the batch (the features the LM head reads)."""

EAGLE_HEAD_ARCHITECTURE = "EagleLlamaForCausalLM"
"""The manifest architecture of an EAGLE head artifact (vLLM's name for it)."""
