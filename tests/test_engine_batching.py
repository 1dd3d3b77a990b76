"""Batching never changes a greedy result: batched == one at a time, chunked prefill ==
whole prefill, prefix-cache hit == miss, preempted and resumed == never preempted."""

from __future__ import annotations

import pytest
from engine_helpers import GREEDY, prompts_of_lengths, token_ids
from tiny_models import TINY_MODELS

from vllm_tvm.runtime.sampling.params import SamplingParams

MIXED_LENGTHS = [3, 70, 9, 41, 17, 1, 64, 28, 5, 52, 33, 12, 77, 21, 46, 8]


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
def test_sixteen_batched_prompts_equal_one_at_a_time(name: str, make_llm) -> None:
    batched_llm = make_llm(name)
    prompts = prompts_of_lengths(batched_llm, MIXED_LENGTHS)
    batched = token_ids(batched_llm.generate(prompts, GREEDY))
    alone_llm = make_llm(name, max_num_seqs=1, enable_prefix_caching=False)
    alone = [token_ids(alone_llm.generate(prompt, GREEDY))[0] for prompt in prompts]
    assert batched == alone


def test_chunked_prefill_equals_whole_prefill(make_llm) -> None:
    whole = make_llm()
    chunked = make_llm(max_num_batched_tokens=8)
    prompts = prompts_of_lengths(whole, [45, 23, 60])
    expected = token_ids(whole.generate(prompts, GREEDY))
    assert token_ids(chunked.generate(prompts, GREEDY)) == expected


def test_prefix_cache_hit_equals_miss(make_llm) -> None:
    llm = make_llm(block_size=16)
    prompt = prompts_of_lengths(llm, [50])[0]
    miss = llm.generate(prompt, GREEDY)[0]
    hit = llm.generate(prompt, GREEDY)[0]
    assert miss.num_cached_tokens == 0
    assert hit.num_cached_tokens == 48  # three full blocks; the last token is always computed
    assert hit.outputs[0].token_ids == miss.outputs[0].token_ids


def test_prefix_shared_with_a_running_request_equals_miss(make_llm) -> None:
    uncached = make_llm(enable_prefix_caching=False)
    llm = make_llm(block_size=16)
    base = prompts_of_lengths(llm, [40])[0]
    longer = base + prompts_of_lengths(llm, [11], stride=101)[0]
    expected = token_ids(uncached.generate([base, longer], GREEDY))
    engine = llm.engine
    engine.add_request("base", base, GREEDY, output_kind="final_only")
    outputs = [out for _ in range(3) for out in engine.step()]
    engine.add_request("longer", longer, GREEDY, output_kind="final_only")
    while engine.has_unfinished:
        outputs.extend(engine.step())
    by_id = {out.request_id: out for out in outputs}
    assert by_id["longer"].num_cached_tokens == 32  # forked from "base" while it runs
    assert token_ids([by_id["base"], by_id["longer"]]) == expected


def test_preempted_and_resumed_equals_never_preempted(make_llm) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    roomy = make_llm()
    tight = make_llm(block_size=16, num_blocks=8)  # 128 tokens for four 60-token sequences
    prompts = prompts_of_lengths(roomy, [20, 18, 22, 19])
    expected = token_ids(roomy.generate(prompts, params))
    assert token_ids(tight.generate(prompts, params)) == expected
    assert tight.engine.metrics.snapshot().num_preemptions > 0


def test_preempted_without_prefix_caching_equals_never_preempted(make_llm) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    roomy = make_llm()
    tight = make_llm(block_size=16, num_blocks=8, enable_prefix_caching=False)
    prompts = prompts_of_lengths(roomy, [20, 18, 22, 19])
    expected = token_ids(roomy.generate(prompts, params))
    assert token_ids(tight.generate(prompts, params)) == expected
    assert tight.engine.metrics.snapshot().num_preemptions > 0


def test_step_budget_past_max_model_len_runs_one_forward(make_llm) -> None:
    """vLLM's budget may exceed max_model_len (16,384 tokens at 8,192): a step then prefills
    pieces of several prompts at once, and the result equals the default budget's."""
    plain = make_llm(max_model_len=96)
    wide = make_llm(max_model_len=96, max_num_batched_tokens=192)
    assert wide.runner.kv_config.prefill_chunk_size == 192
    prompts = prompts_of_lengths(plain, [80, 70])
    chunk_tokens: list[int] = []
    prefill = wide.runner.prefill_logits

    def counting_prefill(seq_ids, chunks, *args, **kwargs):
        chunk_tokens.append(sum(len(chunk) for chunk in chunks))
        return prefill(seq_ids, chunks, *args, **kwargs)

    wide.runner.prefill_logits = counting_prefill
    expected = token_ids(plain.generate(prompts, GREEDY))
    assert token_ids(wide.generate(prompts, GREEDY)) == expected
    assert max(chunk_tokens) == 150  # both prompts in the first step's one forward
