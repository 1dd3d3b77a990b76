"""What an artifact is built for when a speculative method needs more than the plain model.

Why a module of its own, TVM-free: the compiler builds these variants, the runtime checks
an artifact is the variant it needs, and the entry point asks for them; all three name them
here once. EAGLE and MTP (runtime/speculative/head_proposer.py) need the target's last hidden states
of the tokens it computes, so their target is built with a `*_hidden` twin of each ragged
forward (HIDDEN_STATES_FUNCTION and, for latent attention, `extend_hidden` and
`decode_hidden`; a plain build stays as it was, in content and cache key). The EAGLE head
is a checkpoint of its own, built as EAGLE_HEAD_ARCHITECTURE (model_defs/eagle.py); the MTP
layer is read from the target's checkpoint, built as MTP_ARCHITECTURE
(model_defs/deepseek_mtp.py).
"""

from __future__ import annotations

HIDDEN_STATES_TARGET = "hidden_states_target"
"""A target model that also exports its forwards' `*_hidden` twins."""

EAGLE_HEAD = "eagle_head"
"""An EAGLE-1 head checkpoint (fc over [embedding, hidden state], decoder layers, no norm)."""

MTP_HEAD = "mtp_head"
"""A DeepSeek-V3 checkpoint's MTP layer (layer `num_hidden_layers`)."""

SPECULATIVE_ROLES = (HIDDEN_STATES_TARGET, EAGLE_HEAD, MTP_HEAD)

HIDDEN_SUFFIX = "_hidden"
"""The suffix of a forward's twin that also returns the hidden states."""

HIDDEN_STATES_FUNCTION = "prefill" + HIDDEN_SUFFIX
"""A ragged prefill that returns, next to the logits rows, the final-norm hidden states of
every token of the batch (the features the LM head reads)."""

EAGLE_HEAD_ARCHITECTURE = "EagleLlamaForCausalLM"
"""The manifest architecture of an EAGLE head artifact (vLLM's name for it)."""

MTP_ARCHITECTURE = "DeepSeekMTPModel"
"""The manifest architecture of an MTP layer artifact (vLLM's name for it)."""

HEAD_ARCHITECTURES = {"eagle": EAGLE_HEAD_ARCHITECTURE, "mtp": MTP_ARCHITECTURE}
"""The artifact architecture each method's head is built as."""

HEAD_ROLES = {"eagle": EAGLE_HEAD, "mtp": MTP_HEAD}
"""The build role of each method's head."""
