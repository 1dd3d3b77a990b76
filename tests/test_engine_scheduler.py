"""Which request runs first: the fcfs, priority and lpm policies, one sequence at a time."""

from __future__ import annotations

import pytest
from engine_helpers import GREEDY, corpus_ids

from vllm_tvm.runtime.requests.outputs import RequestOutput


def _finish_order(outputs: list[RequestOutput]) -> list[int]:
    times = [output.metrics.finished_time for output in outputs]
    return sorted(range(len(outputs)), key=lambda index: times[index])


def test_fcfs_runs_requests_in_arrival_order(make_llm) -> None:
    llm = make_llm(max_num_seqs=1)
    ids = corpus_ids(llm)
    outputs = llm.generate([ids[0:9], ids[50:70], ids[100:105]], GREEDY)
    assert _finish_order(outputs) == [0, 1, 2]


def test_priority_runs_lower_values_first(make_llm) -> None:
    llm = make_llm(max_num_seqs=1, scheduling_policy="priority")
    ids = corpus_ids(llm)
    prompts = [ids[0:9], ids[50:70], ids[100:105]]
    outputs = llm.generate(prompts, GREEDY, priority=[2, 0, 1])
    assert _finish_order(outputs) == [1, 2, 0]


def test_priority_preempts_the_largest_value_first(make_llm) -> None:
    llm = make_llm(scheduling_policy="priority", block_size=16, num_blocks=6)
    ids = corpus_ids(llm)
    engine = llm.engine
    engine.add_request("low", ids[0:30], GREEDY, priority=5)
    engine.add_request("mid", ids[200:230], GREEDY, priority=1)
    engine.step()
    engine.add_request("high", ids[100:130], GREEDY, priority=0)  # admitted last
    preempted = []
    while engine.has_unfinished:
        before = engine.metrics.snapshot().num_preemptions
        engine.step()
        if engine.metrics.snapshot().num_preemptions > before:
            preempted.extend(seq.request_id for seq in engine.scheduler.waiting)
    assert preempted and set(preempted) == {"low"}


def test_lpm_runs_the_longest_cached_prefix_first(make_llm) -> None:
    llm = make_llm(max_num_seqs=1, block_size=16, scheduling_policy="lpm")
    ids = corpus_ids(llm)
    llm.generate(ids[0:40], GREEDY)  # caches two blocks of this prefix
    outputs = llm.generate([ids[100:140], ids[0:40] + ids[200:210]], GREEDY)
    assert _finish_order(outputs) == [1, 0]
    assert outputs[1].num_cached_tokens == 32


def test_unknown_policy_is_refused_with_the_supported_ones(make_llm) -> None:
    with pytest.raises(ValueError, match="'sjf'; supported: fcfs, priority, lpm"):
        make_llm(scheduling_policy="sjf")
