"""Loading a head that drafts from hidden states (an EAGLE or EAGLE-3 head, an MTP layer)
next to its target, and its two forwards.

Why it exists: the head is a compiled artifact of its own (model_defs/eagle.py, eagle3.py,
deepseek_mtp.py) with its own paged KV cache, like a draft model (draft_runner.py), but its
forwards take the hidden state of each token next to its id and return the head's output
hidden state next to the logits (an EAGLE-3 head's logits, over its draft vocabulary, are
widened to the target's: eagle3_head.py). Its embeddings (and an EAGLE head's LM head) are
the target's, shared on the device, unless the head's checkpoint carries its own (as vLLM
loads them); an EAGLE fc without a bias gets zeros. A head that cannot draft for the target
is refused by name: another hidden size or vocabulary, another target or dtype, a target
built without the hidden states it reads, a target split over ranks or whose shared weights
are quantized.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vllm_tvm.artifacts.manifest import ParamEntry, read_manifest
from vllm_tvm.artifacts.runtime_spec import RuntimeSpec
from vllm_tvm.artifacts.speculative_roles import head_architectures
from vllm_tvm.checkpoints.weight_formats import FLOAT
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.speculative.config import MODEL_METHODS, SpeculativeConfig
from vllm_tvm.runtime.speculative.draft_runner import check_built_like_target, proposer_cache_sizes
from vllm_tvm.runtime.speculative.eagle3_head import (
    check_target_layers,
    draft_to_target,
    widen_logits,
    with_layer_alias,
)
from vllm_tvm.runtime.weights.loader import (
    WeightMismatchError,
    WeightSource,
    load_params,
    numpy_dtype,
    open_weights,
    to_dtype,
)

TARGET_SUPPLIED = {
    "model.embed_tokens.weight": ("model.embed_tokens.weight",),
    "lm_head.weight": ("lm_head.weight", "model.embed_tokens.weight"),
}
"""Head parameters taken from the target when the head's checkpoint lacks them: the
target's parameters to use, the first it has (a tied LM head is the embedding table)."""

FC_BIAS = "model.fc.bias"
"""The head's fc bias: zeros when its checkpoint has none."""


class HeadRunner(ModelRunner):
    """A loaded head: its forwards take and return hidden states (module doc)."""

    draft_to_target: np.ndarray | None = None
    """An EAGLE-3 head's target token of each draft vocabulary entry (None: the same)."""

    def prefill_head(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        hidden: np.ndarray,
        logit_positions: Sequence[int],
        zeroed_rows: Sequence[int] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """Append each chunk (with its tokens' input hidden states, `hidden` [total, h]; the
        embeddings of rows `zeroed_rows` zeroed) in one ragged forward; the logits and
        output hidden states at `logit_positions`."""
        logits, out, positions = self.run_ragged(
            seq_ids, chunks, logit_positions, input_hidden=hidden, zeroed_rows=zeroed_rows
        )
        rows = widen_logits(logits.numpy(), self.draft_to_target, self.vocab_size)
        return rows, out if len(out) == len(positions) else out[positions]

    def decode_head(
        self, seq_ids: Sequence[int], token_ids: Sequence[int], hidden: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """One token per sequence with its input hidden state (`hidden` [batch, h]); the
        logits and output hidden state after it, a row per sequence."""
        shape = (len(seq_ids), 1, self.hidden_size)
        embeddings = self.embed_tokens(token_ids)._create_view(shape)
        self.kv_cache.begin_forward(seq_ids, [1] * len(seq_ids))
        typed = np.ascontiguousarray(to_dtype(hidden, self.manifest.dtype))
        logits, out, _ = self.vm["decode"](
            embeddings, self.forward_input(typed.reshape(shape)), self.kv_cache.handle, self.params
        )
        self.kv_cache.end_forward()
        rows = widen_logits(logits.numpy()[:, 0], self.draft_to_target, self.vocab_size)
        return rows, out.numpy()[:, 0]


def load_head_runner(
    config: SpeculativeConfig,
    target: Runner,
    device: str,
    max_num_seqs: int,
    pool_tokens: int,
    show_progress: bool,
) -> HeadRunner:
    """The head of `config` (its artifact resolved) on `device`, its KV cache holding
    `pool_tokens` plus the drafts of `max_num_seqs` sequences."""
    if config.draft_artifact is None or config.model is None:
        raise ValueError(
            f"the {config.method} head {config.model!r} has no artifact: an engine runs built "
            "artifacts "
            "(LLM and the command line compile the head for its target)"
        )
    manifest = read_manifest(Path(config.draft_artifact))
    check_head_fits(config, manifest.architecture, manifest.runtime, target)
    check_built_like_target(manifest, target, f"the {config.method} head {config.model!r}", "head")
    model = Path(config.model)
    weights = open_weights(model)
    targets = None
    if config.method == "eagle3" and manifest.runtime.draft_head is not None:
        draft_vocab = manifest.runtime.draft_head.draft_vocab_size
        targets = draft_to_target(weights, model, draft_vocab, target.vocab_size)
    runner = HeadRunner(
        config.draft_artifact,
        config.model,
        device=device,
        show_progress=show_progress,
        params=_head_params(manifest.params, weights, model, target, show_progress),
        manifest=manifest,
        **proposer_cache_sizes(config, target, max_num_seqs, pool_tokens),
    )
    runner.draft_to_target = targets
    return runner


def check_head_fits(
    config: SpeculativeConfig, architecture: str, head: RuntimeSpec, target: Runner
) -> None:
    """Refuse by name a head (its runtime spec `head`) that cannot draft for `target`
    (module doc)."""
    model, what = config.model, MODEL_METHODS[config.method]
    if architecture not in head_architectures(config.method):
        raise ValueError(f"{model!r} was not built as an {what} ({architecture})")
    if target.spec.hidden_states is None or not isinstance(target, ModelRunner):
        raise ValueError(
            f"{what}s need the target built with its hidden states, on one device "
            "(tensor-parallel targets are not supported)"
        )
    check_target_layers(config.method, model, head, target.spec)
    for key, name in (("hidden_size", "hidden size"), ("vocab_size", "vocabulary")):
        if getattr(head, key) != getattr(target.spec, key):
            raise ValueError(
                f"the {what} {model!r} has a {name} of {getattr(head, key)}, the target "
                f"{getattr(target.spec, key)}: heads of another {name} are not supported"
            )


def _head_params(
    entries: list[ParamEntry],
    weights: WeightSource,
    model: Path,
    target: ModelRunner,
    show_progress: bool,
) -> list[Any]:
    """The head's parameters on the target's device, in call order (module doc)."""
    available = set(weights.names())
    entries = [with_layer_alias(entry, available) for entry in entries]
    own = [entry for entry in entries if entry.sources[0] in available]
    loaded = dict(
        zip(
            [entry.name for entry in own],
            load_params(own, weights, target.device, show_progress),
            strict=True,
        )
    )
    targets = {
        entry.name: (entry, param)
        for entry, param in zip(target.manifest.params, target.params, strict=True)
    }
    params = []
    for entry in entries:
        if entry.name in loaded:
            params.append(loaded[entry.name])
        elif entry.name == FC_BIAS:
            params.append(target.to_device(np.zeros(entry.shape, numpy_dtype(entry.dtype))))
        elif entry.name in TARGET_SUPPLIED:
            params.append(_target_param(entry, targets))
        else:
            raise WeightMismatchError(
                f"the head's checkpoint {model} has no tensor '{entry.sources[0]}' "
                f"(needed for parameter {entry.name})"
            )
    return params


def _target_param(entry: ParamEntry, targets: dict[str, tuple[ParamEntry, Any]]) -> Any:
    """The target's parameter standing for the head's `entry` (TARGET_SUPPLIED)."""
    for name in TARGET_SUPPLIED[entry.name]:
        if name in targets:
            source, param = targets[name]
            if source.format != FLOAT or source.shape != entry.shape:
                raise ValueError(
                    f"the target's {name} ({source.format}, {source.shape}) cannot stand for "
                    f"the head's {entry.name} {entry.shape}: give the head its own"
                )
            return param
    raise WeightMismatchError(
        f"neither the head nor the target has {entry.name} as a float tensor (a quantized "
        "target's cannot stand for it): give the head its own"
    )
