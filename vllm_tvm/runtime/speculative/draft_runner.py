"""Loading a draft model next to the target, refusing a draft that cannot draft for it.

Why it exists: a draft's token ids are taken as the target's, so a draft with another
vocabulary would propose nonsense that is merely rejected slowly, or ids the target does not
have; a draft built for another target or dtype would run on a device the target does not,
or decode differently from the build the user asked for. Each of these is refused by name
before anything is decoded. The draft's KV cache holds as many tokens as the target's pool
plus room for every sequence's drafts, so drafting rarely has to drop a draft KV sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.manifest import Manifest, read_manifest
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.speculative.config import SpeculativeConfig
from vllm_tvm.runtime.tokenization import load_tokenizer


def load_draft_runner(
    config: SpeculativeConfig,
    target: Runner,
    target_model: Path,
    device: str,
    max_num_seqs: int,
    pool_tokens: int,
    show_progress: bool,
    dummy_params: Callable[[Manifest], list[Any] | None] = lambda manifest: None,
) -> ModelRunner:
    """The draft model of `config` (its artifact resolved) on `device`, with a KV
    cache of `pool_tokens` plus the drafts of `max_num_seqs` sequences; `dummy_params`:
    its weights already on the device for its manifest (dummy weights), or None to read
    them from its checkpoint."""
    if config.draft_artifact is None:
        raise ValueError(
            f"the draft model {config.model!r} has no artifact: an engine runs built artifacts "
            "(LLM and the command line compile the draft like the target)"
        )
    draft_manifest = read_manifest(Path(config.draft_artifact))
    check_built_like_target(draft_manifest, target, f"the draft model {config.model!r}", "draft")
    if draft_manifest.runtime.recurrent_state:
        kinds = ", ".join(sorted({state.kind for state in draft_manifest.runtime.recurrent_state}))
        raise ValueError(
            f"the draft model {config.model!r} keeps recurrent state ({kinds}): draft models "
            "with recurrent state are not supported (draft with ngram, or the target's MTP "
            "layer: method 'mtp')"
        )
    draft_vocab = draft_manifest.runtime.vocab_size
    if draft_vocab != target.vocab_size:
        raise ValueError(
            f"the draft model {config.model!r} has a vocabulary of {draft_vocab} tokens, the "
            f"target {target.vocab_size}: a draft must share the target's tokenizer"
        )
    assert config.model is not None
    check_same_tokenizer(Path(config.model), target_model)
    return ModelRunner(
        config.draft_artifact,
        config.model,
        device=device,
        show_progress=show_progress,
        params=dummy_params(draft_manifest),
        manifest=draft_manifest,
        **proposer_cache_sizes(config, target, max_num_seqs, pool_tokens),
    )


def check_built_like_target(manifest: Manifest, target: Runner, what: str, noun: str) -> None:
    """Refuse a proposer (`what`, e.g. "the draft model 'x'") built for another target or
    dtype than the target's artifact."""
    for name in ("target", "dtype"):
        value, target_value = getattr(manifest, name), getattr(target.manifest, name)
        if value != target_value:
            raise ValueError(
                f"{what} was built with {name} {value!r}, the target with {target_value!r}: "
                f"a {noun} must be built like its target"
            )


def proposer_cache_sizes(
    config: SpeculativeConfig, target: Runner, max_num_seqs: int, pool_tokens: int
) -> dict[str, int]:
    """A proposer's KV cache: the target's pool plus room for each sequence's drafts (and a
    page either side of them), the target's prefill chunk, `max_num_seqs` sequences."""
    page_size = target.kv_config.page_size
    return {
        "max_batch_size": max_num_seqs,
        "prefill_chunk_size": target.kv_config.prefill_chunk_size,
        "max_total_seq_len": pool_tokens
        + max_num_seqs * (config.num_speculative_tokens + 2 * page_size),
    }


def check_same_tokenizer(draft_model: Path, target_model: Path) -> None:
    """Refuse a draft whose tokenizer maps tokens to other ids than the target's; two
    checkpoints without a tokenizer (token-id benchmarks) pass on their vocabulary size."""
    vocabularies = []
    for path in (draft_model, target_model):
        try:
            vocabularies.append(load_tokenizer(path).backend.get_vocab(with_added_tokens=True))
        except FileNotFoundError:
            vocabularies.append(None)
    draft, target = vocabularies
    if draft != target:
        which = "has no tokenizer" if draft is None or target is None else "differs"
        raise ValueError(
            f"the draft model's tokenizer ({draft_model}) {which} from the target's "
            f"({target_model}): a draft must share the target's tokenizer"
        )
