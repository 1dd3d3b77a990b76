"""What an artifact is built for when a speculative method needs more than the plain model.

Why a module of its own, TVM-free: the compiler builds these variants, the runtime checks
an artifact is the variant it needs, and the entry point asks for them; all three name them
here once. EAGLE and MTP (runtime/speculative/head_proposer.py) need the target's last hidden states
of the tokens it computes, so their target is built with a `*_hidden` twin of each ragged
forward (HIDDEN_STATES_FUNCTION and, for latent attention, `extend_hidden` and
`decode_hidden`; a plain build stays as it was, in content and cache key). An EAGLE-3 head
reads the inputs of three of the target's layers instead, so its target's twin returns
those (AUX_HIDDEN_STATES_TARGET; which layers, checkpoints/eagle3_config.py, is part of the
build).
The EAGLE heads are checkpoints of their own, built as EAGLE_HEAD_ARCHITECTURE
(model_defs/eagle.py) and EAGLE3_HEAD_ARCHITECTURE (model_defs/eagle3.py); the MTP layer is
read from the target's checkpoint, built as MTP_ARCHITECTURE (model_defs/deepseek_mtp.py) for
DeepSeek-V3 and as HYBRID_MTP_ARCHITECTURE (model_defs/qwen3_next_mtp.py) for the Qwen3-Next
and Qwen3.5 / Qwen3.6 hybrids.
"""

from __future__ import annotations

HIDDEN_STATES_TARGET = "hidden_states_target"
"""A target model that also exports its forwards' `*_hidden` twins."""

EAGLE_HEAD = "eagle_head"
"""An EAGLE-1 head checkpoint (fc over [embedding, hidden state], decoder layers, no norm)."""

MTP_HEAD = "mtp_head"
"""A checkpoint's MTP layer: DeepSeek-V3's (layer `num_hidden_layers`), a hybrid's (`mtp.`)."""

AUX_HIDDEN_STATES_TARGET = "aux_hidden_states_target"
"""A target model whose HIDDEN_STATES_FUNCTION returns, instead of its final-norm hidden
states, the inputs of the layers an EAGLE-3 head reads, concatenated in layer order (the
build's `aux_hidden_layers`, recorded in its config)."""

EAGLE3_HEAD = "eagle3_head"
"""An EAGLE-3 head checkpoint (fc over three target layers, one decoder layer over
[embedding, hidden state], final norm, its own LM head over a draft vocabulary)."""

SPECULATIVE_ROLES = (
    HIDDEN_STATES_TARGET,
    EAGLE_HEAD,
    MTP_HEAD,
    AUX_HIDDEN_STATES_TARGET,
    EAGLE3_HEAD,
)

HIDDEN_SUFFIX = "_hidden"
"""The suffix of a forward's twin that also returns the hidden states."""

HIDDEN_STATES_FUNCTION = "prefill" + HIDDEN_SUFFIX
"""A ragged prefill that returns, next to the logits rows, the final-norm hidden states of
every token of the batch (the features the LM head reads); built for an EAGLE-3 head, the
inputs of its layers instead (AUX_HIDDEN_STATES_TARGET)."""

EAGLE_HEAD_ARCHITECTURE = "EagleLlamaForCausalLM"
"""The manifest architecture of an EAGLE head artifact (vLLM's name for it)."""

MTP_ARCHITECTURE = "DeepSeekMTPModel"
"""The manifest architecture of a DeepSeek-V3 MTP layer artifact (vLLM's name for it)."""

HYBRID_MTP_ARCHITECTURE = "Qwen3NextMTP"
"""The manifest architecture of a Qwen3-Next / Qwen3.5 MTP layer artifact (vLLM's name for
the Qwen3-Next one; one definition serves both)."""

EAGLE3_HEAD_ARCHITECTURE = "Eagle3LlamaForCausalLM"
"""The manifest architecture of an EAGLE-3 head artifact (vLLM's name for it)."""

HEAD_ARCHITECTURES = {
    "eagle": EAGLE_HEAD_ARCHITECTURE,
    "eagle3": EAGLE3_HEAD_ARCHITECTURE,
    "mtp": MTP_ARCHITECTURE,
}
"""The artifact architecture each method's head is built as (MTP: also HEAD_ALTERNATIVES)."""

HEAD_ALTERNATIVES = {"mtp": (HYBRID_MTP_ARCHITECTURE,)}
"""Further artifact architectures a method's head may be built as (by the target's family)."""


def head_architectures(method: str) -> tuple[str, ...]:
    """Every artifact architecture a head of `method` may have."""
    return (HEAD_ARCHITECTURES[method], *HEAD_ALTERNATIVES.get(method, ()))


HEAD_ROLES = {"eagle": EAGLE_HEAD, "eagle3": EAGLE3_HEAD, "mtp": MTP_HEAD}
"""The build role of each method's head."""

TARGET_ROLES = {
    "eagle": HIDDEN_STATES_TARGET,
    "eagle3": AUX_HIDDEN_STATES_TARGET,
    "mtp": HIDDEN_STATES_TARGET,
}
"""The build role of the target each head method drafts for."""
