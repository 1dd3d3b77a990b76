"""The paged KV cache carries state exactly: decode after prefill == re-prefill of all tokens."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig

PROMPT = "Now is better than never. Although never is often better than right now."


def test_decode_after_prefill_equals_full_reprefill(tiny_model_dir) -> None:
    llm = LLM(tiny_model_dir("llama"), device="cpu", show_progress=False)
    runner = llm.runner
    ids = llm.tokenizer.encode(PROMPT)
    continuation = [5, 77, 140, 9, 300, 42]
    runner.kv_cache.add_sequence(0)
    runner.kv_cache.add_sequence(1)
    try:
        runner.prefill([0], [ids])
        stepped = [runner.decode([0], [token])[0] for token in continuation]
        full = runner.prefill(
            [1],
            [ids + continuation],
            logit_positions=range(len(ids), len(ids) + len(continuation)),
        )
    finally:
        runner.kv_cache.remove_sequence(0)
        runner.kv_cache.remove_sequence(1)
    np.testing.assert_allclose(np.stack(stepped), full, atol=1e-5, rtol=0)


def test_ragged_batch_prefill_equals_separate_prefills(tiny_model_dir) -> None:
    llm = LLM(tiny_model_dir("qwen3_qknorm"), device="cpu", show_progress=False)
    runner = llm.runner
    first = llm.tokenizer.encode("Simple is better than complex.")
    second = llm.tokenizer.encode("Flat is better than nested. Sparse is better than dense.")
    for seq_id in range(4):
        runner.kv_cache.add_sequence(seq_id)
    try:
        together = runner.prefill([0, 1], [first, second])
        alone = np.concatenate([runner.prefill([2], [first]), runner.prefill([3], [second])])
        batched_decode = runner.decode([0, 1], [11, 12])
        single_decode = np.concatenate([runner.decode([2], [11]), runner.decode([3], [12])])
    finally:
        for seq_id in range(4):
            runner.kv_cache.remove_sequence(seq_id)
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)
    np.testing.assert_allclose(batched_decode, single_decode, atol=1e-5, rtol=0)


CACHE = KVCacheConfig(max_batch_size=8, max_total_seq_len=1024, prefill_chunk_size=256)


def test_a_cache_holds_what_fits_its_sizes() -> None:
    CACHE.check_holds(max_num_seqs=8, max_num_batched_tokens=256, pool_tokens=1024)


@pytest.mark.parametrize(
    ("limits", "refusal"),
    [
        ((9, 256, 1024), "max_num_seqs 9 exceeds the KV cache's batch size 8"),
        ((8, 257, 1024), "max_num_batched_tokens 257 exceeds the KV cache's prefill chunk of 256"),
        ((8, 256, 1025), "the KV pool of 1025 tokens does not fit the KV cache's 1024"),
    ],
    ids=["sequences", "step tokens", "pool"],
)
def test_a_cache_refuses_what_exceeds_its_sizes_naming_both(limits, refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        CACHE.check_holds(*limits)
