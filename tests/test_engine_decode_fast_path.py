"""The scheduler's decode-only fast path decides exactly what the general rule decides.

Random workloads (arrivals, shared prefixes, a pool small enough to preempt and evict, each
policy) run on a scheduler and block manager over a KV cache that keeps lengths only. Before
every step a deep copy of the whole state is scheduled by the general rule alone; the real
`schedule()` (fast path when it applies) must give the same batch, the same preemptions and
leave the same blocks, sequences and KV lengths behind.
"""

from __future__ import annotations

import copy
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_tvm.runtime.engine.intake import RequestIntake
from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.engine.scheduler import POLICIES, Scheduler, SchedulerConfig, SchedulerOutput
from vllm_tvm.runtime.kv.block_manager import BlockManager
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.requests.sequence import EngineSequence
from vllm_tvm.runtime.sampling.params import SamplingParams

# The null KV cache (lengths only) is the host-cost benchmark's: benchmarks/engine_host_cost.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from engine_host_cost import NullKVCache

BLOCK_SIZE = 16
MAX_MODEL_LEN = 256
VOCAB = 8  # few ids, so prompts share prefixes and the prefix cache is used


def _make_scheduler(rng: random.Random, policy: str) -> tuple[Scheduler, NullKVCache]:
    kv = NullKVCache()
    cache = CacheConfig(
        block_size=BLOCK_SIZE, num_blocks=rng.randint(12, 40), enable_prefix_caching=True
    )
    config = SchedulerConfig(
        max_num_seqs=rng.randint(4, 12),
        max_num_batched_tokens=rng.choice([8, 64, 512]),
        policy=policy,  # type: ignore[arg-type]
    )
    return Scheduler(config, BlockManager(kv, cache), EngineMetrics()), kv  # type: ignore[arg-type]


def _add_request(scheduler: Scheduler, intake: RequestIntake, rng: random.Random) -> None:
    prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 60))]
    params = SamplingParams(temperature=0.0, max_tokens=rng.randint(1, 40), ignore_eos=True)
    request = intake.make_request(prompt, params, priority=rng.randint(0, 3))
    for seq in request.seqs:
        scheduler.add(seq)


def _describe(output: SchedulerOutput) -> tuple[list[tuple[int, int]], list[int]]:
    return (
        [(item.seq.seq_id, item.num_tokens) for item in output.scheduled],
        [seq.seq_id for seq in output.preempted],
    )


def _state(scheduler: Scheduler, kv: NullKVCache) -> dict[str, Any]:
    manager = scheduler.block_manager

    def seq_state(seq: EngineSequence) -> tuple[Any, ...]:
        return (seq.seq_id, seq.status, seq.num_computed_tokens, seq.kv_id, len(seq.token_ids))

    return {
        "running": [seq_state(seq) for seq in scheduler.running],
        "waiting": [seq_state(seq) for seq in scheduler.waiting],
        "tables": dict(manager._tables),
        "free": list(manager._free_ids),
        "num_free": manager.num_free_blocks,
        "cached": manager.num_cached_blocks,
        "kv": dict(kv.lengths),
    }


def _run_step(
    scheduler: Scheduler, kv: NullKVCache, output: SchedulerOutput, rng: random.Random
) -> None:
    """What the engine does with a step: compute the tokens, sample, finish."""
    for item in output.scheduled:
        seq = item.seq
        assert seq.kv_id is not None
        seq.num_computed_tokens += item.num_tokens
        kv.lengths[seq.kv_id] += item.num_tokens
        scheduler.block_manager.cache_full_blocks(seq)
        if seq.num_computed_tokens == len(seq.token_ids):
            seq.append_token(rng.randrange(VOCAB), None, 0.0)
            if seq.is_finished:
                scheduler.remove(seq)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(4))
def test_the_decode_fast_path_schedules_as_the_general_rule(policy: str, seed: int) -> None:
    rng = random.Random(seed)
    scheduler, kv = _make_scheduler(rng, policy)
    intake = RequestIntake(None, [VOCAB], MAX_MODEL_LEN, VOCAB + 1)
    general_rule = scheduler._schedule_any
    general_steps = 0

    def counted_general_rule() -> SchedulerOutput:
        nonlocal general_steps
        general_steps += 1
        return general_rule()

    scheduler._schedule_any = counted_general_rule  # type: ignore[method-assign]
    steps = 300
    for step in range(steps):
        if step % 100 < 15 and rng.random() < 0.2:  # bursts of arrivals, then quiet
            for _ in range(rng.randint(1, 3)):
                _add_request(scheduler, intake, rng)
        # The metrics hold a lock (not copyable) and are not compared: shared.
        memo = {id(scheduler.metrics): scheduler.metrics}
        reference, reference_kv = copy.deepcopy((scheduler, kv), memo)
        expected = general_rule.__func__(reference)  # type: ignore[attr-defined]
        output = scheduler.schedule()
        assert _describe(output) == _describe(expected)
        assert _state(scheduler, kv) == _state(reference, reference_kv)
        _run_step(scheduler, kv, output, rng)
    fast_steps = steps - general_steps
    assert fast_steps > 10 and general_steps > 10, (fast_steps, general_steps)


def test_the_fast_path_declines_and_reserves_nothing_when_blocks_run_short() -> None:
    rng = random.Random(0)
    kv = NullKVCache()
    cache = CacheConfig(block_size=BLOCK_SIZE, num_blocks=2, enable_prefix_caching=False)
    config = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=64, policy="fcfs")
    scheduler = Scheduler(config, BlockManager(kv, cache), EngineMetrics())  # type: ignore[arg-type]
    intake = RequestIntake(None, [VOCAB], MAX_MODEL_LEN, VOCAB + 1)
    for _ in range(2):
        params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
        request = intake.make_request([1] * BLOCK_SIZE, params)
        scheduler.add(request.seqs[0])
    _run_step(scheduler, kv, scheduler.schedule(), rng)  # both prompts fill their one block
    before = _state(scheduler, kv)
    assert scheduler._schedule_decodes() is None  # each needs a second block; none is free
    assert _state(scheduler, kv) == before
    assert len(scheduler.schedule().preempted) == 1
