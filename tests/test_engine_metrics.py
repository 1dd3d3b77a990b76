"""The engine's metrics count what happened: tokens, requests, prefix-cache hits, latencies."""

from __future__ import annotations

from engine_helpers import GREEDY, prompts_of_lengths

from vllm_tvm.runtime.engine.metrics import Histogram
from vllm_tvm.runtime.sampling.params import SamplingParams


def test_histogram_counts_each_value_in_the_first_bucket_that_holds_it() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        histogram.observe(value)
    assert histogram.counts == [2, 1, 1]
    assert (histogram.count, histogram.total) == (4, 3.65)


def test_tokens_requests_and_latencies_are_counted(make_llm) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [7, 19, 4])
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    llm.generate(prompts, params)
    stats = llm.engine.metrics.snapshot()
    assert stats.prompt_tokens == 7 + 19 + 4
    assert stats.generation_tokens == 15
    assert dict(stats.request_success) == {"length": 3}
    for histogram in (
        stats.time_to_first_token,
        stats.time_per_output_token,
        stats.e2e_request_latency,
    ):
        assert histogram.count == 3
    assert (stats.num_requests_running, stats.num_requests_waiting) == (0, 0)
    assert stats.kv_cache_usage == 0.0


def test_prefix_cache_queries_and_hits_are_counted_in_tokens(make_llm) -> None:
    llm = make_llm(block_size=16)
    prompt = prompts_of_lengths(llm, [40])[0]
    llm.generate(prompt, GREEDY)
    llm.generate(prompt, GREEDY)
    stats = llm.engine.metrics.snapshot()
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (80, 32)


def test_kv_usage_and_running_count_are_read_while_requests_run(make_llm) -> None:
    llm = make_llm(block_size=16, num_blocks=10)
    engine = llm.engine
    for index, prompt in enumerate(prompts_of_lengths(llm, [20, 30])):
        engine.add_request(str(index), prompt, GREEDY)
    engine.step()
    stats = engine.metrics.snapshot()
    assert stats.num_requests_running == 2
    assert stats.kv_cache_usage == 4 / 10  # 2 + 2 blocks of 16 for 20 and 30 tokens
    while engine.has_unfinished:
        engine.step()
