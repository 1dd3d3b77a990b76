"""A hybrid model (Gated DeltaNet + gated attention) served through `LLM`, compiled once per
architecture: greedy tokens equal transformers' `generate` on the same weights.

Oracle: transformers' model written by `save_pretrained` (hybrid_checkpoints.py), fp32, its
pure-torch delta rule, each prompt generated alone. Three prompts, one longer than the
delta rule's 64-token chunk. Ours: all three batched, each alone, with prefill split into
small chunks (the recurrent state carried from chunk to chunk), and with a KV pool too small
for all three at once (preempted sequences recompute from a fresh zeroed state slot).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from engine_helpers import assert_all_blocks_free
from hybrid_checkpoints import SHAPE, hf_hybrid_model
from transformers_greedy import greedy_continuations

from vllm_tvm.checkpoints.families.qwen3_next import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

NEW_TOKENS = 40
PROMPT_LENGTHS = (70, 9, 23)
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
ENGINE = {"device": "cpu", "show_progress": False, "skip_tokenizer_init": True}


@pytest.fixture(scope="module", params=[QWEN3_5, QWEN3_NEXT, QWEN3_5_MOE])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(checkpoint dir, prompts, transformers' greedy continuations) per architecture."""
    hf = hf_hybrid_model(request.param)
    directory = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(directory)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, SHAPE["vocab_size"], n).tolist() for n in PROMPT_LENGTHS]
    return directory, prompts, greedy_continuations(hf, prompts, NEW_TOKENS)


@pytest.fixture
def make_hybrid_llm(checkpoint) -> Iterator[Any]:
    """Factory of LLMs over the checkpoint (options: EngineArgs); all blocks free after."""
    made: list[LLM] = []

    def make(**options: Any) -> LLM:
        llm = LLM(checkpoint[0], **{**ENGINE, "max_model_len": 256, **options})
        made.append(llm)
        return llm

    yield make
    for llm in made:
        assert_all_blocks_free(llm)


def _tokens(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    return [list(output.outputs[0].token_ids) for output in llm.generate(prompts, GREEDY)]


def test_batched_and_sequential_greedy_equal_transformers(checkpoint, make_hybrid_llm) -> None:
    _, prompts, expected = checkpoint
    llm = make_hybrid_llm()
    assert _tokens(llm, prompts) == expected
    assert [_tokens(llm, [prompt])[0] for prompt in prompts] == expected


def test_chunked_prefill_equals_transformers(checkpoint, make_hybrid_llm) -> None:
    _, prompts, expected = checkpoint
    llm = make_hybrid_llm(max_num_batched_tokens=24, max_num_seqs=2)
    assert _tokens(llm, prompts) == expected


def test_preempted_sequences_recompute_to_the_same_tokens(checkpoint, make_hybrid_llm) -> None:
    _, prompts, expected = checkpoint
    llm = make_hybrid_llm(num_blocks=8, block_size=16, max_model_len=128)
    assert _tokens(llm, prompts) == expected
    assert llm.engine.metrics.snapshot().num_preemptions > 0


NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}
REPEATING = [[5, 17, 5, 17, 5, 17, 5, 17] * 4, [3, 9, 44] * 25, [60] * 12]
"""Prompts n-gram lookup drafts from at once (the random ones only once outputs repeat)."""


@pytest.mark.parametrize("preempted", [False, True])
def test_ngram_speculation_changes_no_greedy_token(
    preempted: bool, checkpoint, make_hybrid_llm
) -> None:
    # Drafts accepted and rejected: each rejection rolls the recurrent state back to its
    # snapshot and recomputes the accepted tokens (runtime/speculative/speculator.py).
    _, prompts, expected = checkpoint
    sizes = {"num_blocks": 8, "block_size": 16, "max_model_len": 128} if preempted else {}
    plain = _tokens(make_hybrid_llm(), REPEATING)
    llm = make_hybrid_llm(speculative_config=NGRAM, **sizes)
    assert _tokens(llm, [*prompts, *REPEATING]) == [*expected, *plain]
    stats = llm.engine.metrics.snapshot()
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    assert (stats.num_preemptions > 0) == preempted


def test_a_draft_model_with_recurrent_state_is_refused_by_name(checkpoint) -> None:
    draft = {"method": "draft_model", "model": str(checkpoint[0]), "num_speculative_tokens": 2}
    with pytest.raises(ValueError, match=r"keeps recurrent state \(gated_delta_net\): draft"):
        LLM(checkpoint[0], **ENGINE, max_model_len=256, speculative_config=draft)
