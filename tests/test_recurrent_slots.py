"""Recurrent-state slots under the scheduler: one per running sequence, never shared, none
leaked, zeroed at admission, carried across prefill chunks, freed at finish, abort and
preemption.

Random workloads (arrivals, aborts, a KV pool small enough to preempt, fewer slots than
`max_num_seqs` in some) run on the real scheduler and block manager over a KV cache that
keeps lengths only. A stand-in state pool records, per slot, which sequence's tokens have
been folded into it since it was last zeroed: a sequence that ever reads a state holding
another sequence's tokens, or holding fewer of its own than it has computed, fails.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from vllm_tvm.artifacts.runtime_spec import RecurrentStateSpec
from vllm_tvm.runtime.engine.intake import RequestIntake
from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.engine.scheduler import POLICIES, Scheduler, SchedulerConfig
from vllm_tvm.runtime.kv.block_manager import BlockManager
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.kv.recurrent_slots import RecurrentSlots, state_bytes_per_slot
from vllm_tvm.runtime.requests.sequence import FINISH_ABORT, EngineSequence, SequenceStatus
from vllm_tvm.runtime.sampling.params import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from engine_host_cost import NullKVCache

BLOCK_SIZE = 16
MAX_MODEL_LEN = 256
VOCAB = 50


class StatePoolRecord:
    """What each slot's state holds: (seq_id, tokens folded in) since it was zeroed."""

    def __init__(self, num_slots: int) -> None:
        # Before its first zeroing a slot holds what the device memory held: no one's state.
        self.contents: list[tuple[int, int] | None] = [(-1, 0)] * num_slots
        self.zeroed: list[int] = []

    def zero_slot(self, slot: int) -> None:
        self.contents[slot] = None
        self.zeroed.append(slot)

    def forward(self, seq: EngineSequence, num_tokens: int) -> None:
        """Fold `num_tokens` more tokens of `seq` into its slot, checking the state it
        starts from is its own and holds exactly its computed tokens."""
        slot = seq.recurrent_slot
        assert slot is not None, f"sequence {seq.seq_id} runs without a slot"
        held = self.contents[slot]
        start = (seq.seq_id, 0) if held is None else held
        assert start == (seq.seq_id, seq.num_computed_tokens), (
            f"sequence {seq.seq_id} at {seq.num_computed_tokens} tokens reads state {held}"
        )
        self.contents[slot] = (seq.seq_id, seq.num_computed_tokens + num_tokens)


def _make(
    rng: random.Random, policy: str
) -> tuple[Scheduler, RecurrentSlots, StatePoolRecord, NullKVCache]:
    max_num_seqs = rng.randint(2, 10)
    num_slots = rng.choice([max_num_seqs, max(1, max_num_seqs - rng.randint(1, 3))])
    record = StatePoolRecord(num_slots)
    slots = RecurrentSlots(num_slots, record.zero_slot)
    kv = NullKVCache()
    cache = CacheConfig(BLOCK_SIZE, rng.randint(8, 14), enable_prefix_caching=False)
    config = SchedulerConfig(max_num_seqs, rng.choice([8, 48, 96]), policy)  # type: ignore[arg-type]
    manager = BlockManager(kv, cache, slots)  # type: ignore[arg-type]
    return Scheduler(config, manager, EngineMetrics()), slots, record, kv


def _check_slots(scheduler: Scheduler, slots: RecurrentSlots) -> None:
    """Running sequences hold distinct slots, the allocator agrees, waiting ones hold none."""
    held = {seq.recurrent_slot: seq.seq_id for seq in scheduler.running}
    assert len(held) == len(scheduler.running), "two running sequences share a slot"
    assert held == slots.holders()
    assert slots.num_used + slots.num_free == slots.num_slots
    assert all(seq.recurrent_slot is None for seq in scheduler.waiting)
    assert len(scheduler.running) <= slots.num_slots


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(3))
def test_slots_follow_admission_preemption_abort_and_finish(policy: str, seed: int) -> None:
    rng = random.Random(seed)
    scheduler, slots, record, kv = _make(rng, policy)
    intake = RequestIntake(None, [VOCAB], MAX_MODEL_LEN, VOCAB + 1)
    live: list[EngineSequence] = []
    events = {"preempted": 0, "aborted": 0, "finished": 0, "chunked": 0}
    for step in range(400):
        if step < 300 and rng.random() < 0.3:
            prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 90))]
            params = SamplingParams(temperature=0.0, max_tokens=rng.randint(1, 60), ignore_eos=True)
            for seq in intake.make_request(prompt, params, priority=rng.randint(0, 3)).seqs:
                scheduler.add(seq)
                live.append(seq)
        if live and rng.random() < 0.05:  # an abort, running or waiting
            seq = live.pop(rng.randrange(len(live)))
            seq.finish(FINISH_ABORT)
            scheduler.remove(seq)
            assert seq.recurrent_slot is None
            events["aborted"] += 1
        held_before = {seq.seq_id: seq.recurrent_slot for seq in scheduler.running}
        output = scheduler.schedule()
        for seq in output.preempted:
            assert seq.recurrent_slot is None and seq.num_computed_tokens == 0
        events["preempted"] += len(output.preempted)
        _check_slots(scheduler, slots)
        for item in output.scheduled:
            seq = item.seq
            if seq.seq_id in held_before:  # kept across steps (prefill chunks, decodes)
                assert seq.recurrent_slot == held_before[seq.seq_id]
            if 1 < item.num_tokens < len(seq.token_ids) - seq.num_computed_tokens:
                events["chunked"] += 1
            record.forward(seq, item.num_tokens)
            kv.forward([seq.kv_id], [item.num_tokens])  # type: ignore[list-item]
            seq.num_computed_tokens += item.num_tokens
            if seq.num_computed_tokens == len(seq.token_ids):
                seq.append_token(rng.randrange(VOCAB), None, 0.0)
                if seq.is_finished:
                    scheduler.remove(seq)
                    live.remove(seq)
                    events["finished"] += 1
        _check_slots(scheduler, slots)
    while scheduler.has_unfinished:  # abort what is left: everything comes back
        seq = (scheduler.running or list(scheduler.waiting))[0]
        seq.finish(FINISH_ABORT)
        scheduler.remove(seq)
    assert slots.num_free == slots.num_slots and not slots.holders()
    assert not kv.lengths
    assert all(count > 0 for count in events.values()), events


def test_admission_waits_for_a_free_slot() -> None:
    record = StatePoolRecord(2)
    slots = RecurrentSlots(2, record.zero_slot)
    cache = CacheConfig(BLOCK_SIZE, 64, enable_prefix_caching=False)
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=512, policy="fcfs")
    scheduler = Scheduler(config, BlockManager(NullKVCache(), cache, slots), EngineMetrics())  # type: ignore[arg-type]
    intake = RequestIntake(None, [VOCAB], MAX_MODEL_LEN, VOCAB + 1)
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    seqs = [intake.make_request([1, 2, 3], params).seqs[0] for _ in range(3)]
    for seq in seqs:
        scheduler.add(seq)
    output = scheduler.schedule()
    assert [item.seq for item in output.scheduled] == seqs[:2]
    assert list(scheduler.waiting) == [seqs[2]] and seqs[2].status is SequenceStatus.WAITING
    assert sorted(record.zeroed) == [0, 1]
    freed = seqs[0].recurrent_slot
    seqs[0].finish(FINISH_ABORT)
    scheduler.remove(seqs[0])
    assert scheduler.schedule().scheduled[-1].seq is seqs[2]
    assert seqs[2].recurrent_slot == freed != seqs[1].recurrent_slot
    assert record.zeroed == [0, 1, freed]  # zeroed again as it was taken


def test_state_bytes_per_slot_sums_every_layer_of_every_kind() -> None:
    states = (
        RecurrentStateSpec("gated_delta_net", layers=3, conv_state_bytes=96, ssm_state_bytes=512),
        RecurrentStateSpec("other", layers=2, conv_state_bytes=8, ssm_state_bytes=0),
    )
    assert state_bytes_per_slot(states) == 3 * (96 + 512) + 2 * 8
