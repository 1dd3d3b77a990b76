"""Which proposer drafts for a speculative configuration that drafts with a model.

Why a module of its own: the engine builds its proposer from the configuration and the
loaded draft runner, and each method that drafts with a model pairs a runner kind with a
proposer kind; that pairing, and the refusal of a missing runner, is written here once.
"""

from __future__ import annotations

from vllm_tvm.artifacts.speculative_roles import HEAD_ARCHITECTURES, MTP_ARCHITECTURE
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.sampling.sampler import Sampler
from vllm_tvm.runtime.speculative.config import MODEL_METHODS, SpeculativeConfig
from vllm_tvm.runtime.speculative.draft_model import DraftModelProposer
from vllm_tvm.runtime.speculative.eagle3_head import exported_hidden_width
from vllm_tvm.runtime.speculative.head_proposer import HeadProposer
from vllm_tvm.runtime.speculative.head_runner import HeadRunner
from vllm_tvm.runtime.speculative.target_hidden import TargetHiddenStates


def proposer_for(
    config: SpeculativeConfig,
    target: Runner,
    draft_runner: ModelRunner | None,
    sampler: Sampler,
) -> DraftModelProposer | None:
    """The proposer of `config`'s method that drafts with `draft_runner` (None: n-grams)."""
    if config.method not in MODEL_METHODS:
        return None
    if draft_runner is None:
        raise ValueError(
            f"speculative method {config.method!r} needs the "
            f"{MODEL_METHODS[config.method]}'s runner"
        )
    if config.method in HEAD_ARCHITECTURES:
        if not isinstance(draft_runner, HeadRunner):
            raise ValueError(f"speculative method {config.method!r} needs a head's runner")
        store = TargetHiddenStates(exported_hidden_width(target.spec))
        masks_first_position = draft_runner.manifest.architecture == MTP_ARCHITECTURE
        return HeadProposer(draft_runner, sampler, store, masks_first_position)
    return DraftModelProposer(draft_runner, sampler)
