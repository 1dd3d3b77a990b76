"""What an EAGLE-3 head must agree on with its target, checked at load, and its draft
vocabulary mapped onto the target's.

Why a module of its own: an EAGLE-3 head (model_defs/eagle3.py) differs from the other
heads in two facts the runtime owns.
- It reads the inputs of three target layers (checkpoints/eagle3_config.py), which the
  target artifact must have been built to export: a target built for other layers, or for
  an EAGLE-1 head, would feed it other features, so it is refused by name (and an EAGLE-1
  or MTP head over an EAGLE-3 target likewise).
- Its LM head covers a draft vocabulary: its checkpoint's `d2t` maps draft entry i to the
  target's token i + d2t[i] (vLLM's Eagle3LlamaForCausalLM.compute_logits). The head
  runner widens each row of logits to the target's vocabulary with it, -inf for tokens
  outside the draft vocabulary, so the proposer drafts (and a sampled draft carries q) over
  the target's tokens as with any other head. A draft vocabulary smaller than the target's
  without `d2t`, or a `d2t` that maps outside the vocabulary or twice onto one token, is
  refused by name.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.artifacts.runtime_spec import RuntimeSpec
from vllm_tvm.checkpoints.eagle3_config import (
    EAGLE3_AUX_LAYERS_KEY,
    EAGLE3_D2T,
    EAGLE3_LAYER_ALIAS,
    EAGLE3_LAYER_PREFIX,
    eagle3_aux_layers,
)
from vllm_tvm.runtime.weights.loader import WeightSource


def check_target_layers(
    method: str, model: str | None, head: RuntimeSpec, target: RuntimeSpec
) -> None:
    """Refuse a head of `method` (its runtime spec `head`) whose target does not export the
    hidden states it reads."""
    built = list(target.hidden_states.layers) if target.hidden_states is not None else []
    if method != "eagle3":
        if built:
            raise ValueError(
                f"the target was built for an EAGLE-3 head (the inputs of layers {built}); "
                f"the {method} head {model!r} reads its final hidden states: build the target "
                "for it"
            )
        return
    named = list(head.draft_head.target_layers) if head.draft_head is not None else []
    wanted = list(eagle3_aux_layers({EAGLE3_AUX_LAYERS_KEY: named}, target.num_layers))
    if built != wanted:
        exported = f"the inputs of layers {built}" if built else "its final hidden states"
        raise ValueError(
            f"the EAGLE-3 head {model!r} reads the inputs of target layers {wanted}; the "
            f"target was built exporting {exported}: build the target for this head"
        )


def exported_hidden_width(target: RuntimeSpec) -> int:
    """Columns of the hidden states the target's hidden-states prefill returns per token."""
    return target.hidden_states.width if target.hidden_states is not None else target.hidden_size


def draft_to_target(
    weights: WeightSource, model: Path, draft_vocab: int, vocab: int
) -> np.ndarray | None:
    """The target token of each draft vocabulary entry (module doc); None when the draft
    vocabulary is the target's and the checkpoint has no `d2t` (entry i is token i)."""
    if EAGLE3_D2T not in weights.names():
        if draft_vocab != vocab:
            raise ValueError(
                f"the EAGLE-3 head {model} has a draft vocabulary of {draft_vocab} tokens and "
                f"no '{EAGLE3_D2T}' tensor mapping them onto the target's {vocab}"
            )
        return None
    offsets = np.asarray(weights.get(EAGLE3_D2T))
    if offsets.shape != (draft_vocab,) or offsets.dtype.kind not in "iu":
        raise ValueError(
            f"the EAGLE-3 head {model}'s '{EAGLE3_D2T}' is {offsets.dtype} {list(offsets.shape)}; "
            f"expected integers [{draft_vocab}] (draft_vocab_size)"
        )
    targets = np.arange(draft_vocab, dtype=np.int64) + offsets.astype(np.int64)
    if targets.min() < 0 or targets.max() >= vocab or len(np.unique(targets)) != draft_vocab:
        raise ValueError(
            f"the EAGLE-3 head {model}'s '{EAGLE3_D2T}' maps its draft vocabulary outside the "
            f"target's {vocab} tokens or onto one token twice"
        )
    return targets


def widen_logits(logits: np.ndarray, targets: np.ndarray | None, vocab: int) -> np.ndarray:
    """Draft-vocabulary logits rows [rows, draft_vocab] as rows over the target's
    vocabulary, -inf outside the draft vocabulary (unchanged without a mapping)."""
    if targets is None:
        return logits
    wide = np.full((len(logits), vocab), -np.inf, dtype=logits.dtype)
    wide[:, targets] = logits
    return wide


def with_layer_alias(entry: ParamEntry, available: set[str]) -> ParamEntry:
    """`entry` read from `layers.0.` tensors when the checkpoint spells the head's layer so
    instead of `midlayer.` (vLLM reads both)."""
    if entry.sources[0] in available or EAGLE3_LAYER_PREFIX not in entry.sources[0]:
        return entry
    sources = [name.replace(EAGLE3_LAYER_PREFIX, EAGLE3_LAYER_ALIAS, 1) for name in entry.sources]
    return replace(entry, sources=sources) if sources[0] in available else entry
