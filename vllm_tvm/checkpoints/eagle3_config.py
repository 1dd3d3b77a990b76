"""What an EAGLE-3 head's config.json says about the target it drafts for.

Why in checkpoints: the entry point reads it to ask for the target build the head needs
(the inputs of which layers it exports), the compiler to build the head, and the runtime
to check that a loaded target exports the layers the head reads; all of them read it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EAGLE3_CHECKPOINT_ARCHITECTURES = ("LlamaForCausalLMEagle3",)
"""The `architectures` an EAGLE-3 head's config.json names (EAGLE's own layout, as
yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): such a checkpoint is built only as a head."""

EAGLE3_LAYER_PREFIX = "midlayer."
"""The prefix of the head's decoder layer tensors in EAGLE-3 checkpoints."""

EAGLE3_LAYER_ALIAS = "layers.0."
"""The other spelling of that prefix, which vLLM also reads (converted checkpoints)."""

EAGLE3_D2T = "d2t"
"""The int64 [draft_vocab_size] tensor mapping draft entry i to target token i + d2t[i]."""

EAGLE3_AUX_LAYERS_KEY = "eagle_aux_hidden_state_layer_ids"
"""The key of an EAGLE-3 head's config naming the target layers it reads (vLLM's)."""

EAGLE3_AUX_LAYER_COUNT = 3
"""Target layers an EAGLE-3 head reads: its fc takes three hidden states."""


def eagle3_aux_layers(head_config: Mapping[str, Any], target_layers: int) -> tuple[int, ...]:
    """The layers of a target of `target_layers` layers whose inputs (the residual stream
    entering layer i, transformers' `hidden_states[i]`) an EAGLE-3 head reads: its config's
    EAGLE3_AUX_LAYERS_KEY, else vLLM's default (2, L // 2, L - 3); in layer order, as vLLM
    concatenates them. Refused by name unless three distinct layers of the target."""
    given = head_config.get(EAGLE3_AUX_LAYERS_KEY)
    if given:
        layers, origin = tuple(int(i) for i in given), f"the head's {EAGLE3_AUX_LAYERS_KEY}"
    else:
        layers = (2, target_layers // 2, target_layers - 3)
        origin = f"vLLM's default for {target_layers} layers"
    if (
        len(layers) != EAGLE3_AUX_LAYER_COUNT
        or len(set(layers)) != len(layers)
        or not all(0 <= layer < target_layers for layer in layers)
    ):
        raise ValueError(
            f"EAGLE-3 aux hidden state layers {list(layers)} ({origin}) are not "
            f"{EAGLE3_AUX_LAYER_COUNT} distinct layers of the target's {target_layers} "
            f"(0 to {target_layers - 1}): give the head's config {EAGLE3_AUX_LAYERS_KEY}"
        )
    return tuple(sorted(layers))
