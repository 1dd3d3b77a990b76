"""The engine over a model with recurrent state, without a compiled hybrid model: a runner
with fixed logits whose forwards read and write a real recurrent-state pool on the CPU.

Each forward checks, for every batch row, that the row's slot holds exactly its own
sequence's computed tokens (zero when it has none) and folds the chunk in, so a slot that
was not zeroed, that two sequences share, that a preempted sequence keeps, or that still
holds a rejected draft (speculative decoding rolls it back to a snapshot), fails. Also:
the pool's bytes come out of the KV memory budget, `/metrics` shows its usage, and an engine
whose parts do not fit the model's spec is refused by name.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tvm

from vllm_tvm.artifacts.runtime_spec import RecurrentStateSpec
from vllm_tvm.runtime.engine.builder import _cap_to_slots
from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.runtime.engine.scheduler import SchedulerConfig
from vllm_tvm.runtime.kv.cache_config import (
    CacheConfig,
    KVCacheSizeError,
    PoolSizes,
    resolve_pool_sizes,
)
from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig
from vllm_tvm.runtime.kv.recurrent_pool import RecurrentStatePool
from vllm_tvm.runtime.kv.recurrent_slots import state_bytes_per_slot
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.speculative.config import SpeculativeConfig
from vllm_tvm.server.metrics import metrics_registry, render

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from engine_host_cost import NullRunner

VOCAB = 64
BLOCK_SIZE = 16
STATES = (RecurrentStateSpec("gated_delta_net", layers=2, conv_state_bytes=16, ssm_state_bytes=32),)
SLOT_BYTES = 2 * (16 + 32)


class HybridNullRunner(NullRunner):
    """Fixed logits; each forward checks and advances its rows' recurrent state."""

    def __init__(
        self, num_slots: int, max_num_seqs: int, pool_tokens: int, snapshots: bool = False
    ) -> None:
        kv = KVCacheConfig(max_num_seqs, pool_tokens, prefill_chunk_size=256)
        super().__init__(VOCAB, 256, kv, argmax_once=False)
        self.spec = replace(self.spec, recurrent_state=STATES, prefix_caching=False)
        self.recurrent_pool = RecurrentStatePool(STATES, num_slots, tvm.cpu(), snapshots)
        for pool in [*self.recurrent_pool.conv_pools, *self.recurrent_pool.ssm_pools]:
            pool.copyfrom(np.full(tuple(pool.shape), 7.0, np.float32))  # what memory held
        self.engine: LLMEngine | None = None
        self.rows_checked = 0

    def _advance(
        self, kv_ids: Sequence[int], lengths: Sequence[int], slots: Sequence[int] | None
    ) -> None:
        assert self.engine is not None and self.recurrent_pool is not None
        by_kv = {seq.kv_id: seq for seq in self.engine.scheduler.running}
        assert slots == [by_kv[kv_id].recurrent_slot for kv_id in kv_ids]  # the rows' own
        state = self.recurrent_pool.forward_state(slots)
        for kv_id, slot, length in zip(kv_ids, state.slots.numpy(), lengths, strict=True):
            seq = by_kv[kv_id]
            for pool in state.conv_pools:  # values 0, 1 of a row: (seq_id, tokens folded in)
                row = pool.numpy()
                expected = (
                    (seq.seq_id, seq.num_computed_tokens) if seq.num_computed_tokens else (0, 0)
                )
                assert tuple(row[slot, :2]) == expected, (seq.seq_id, tuple(row[slot, :2]))
                row[slot, :2] = (seq.seq_id, seq.num_computed_tokens + length)
                pool.copyfrom(row)
            self.rows_checked += 1

    def prefill_logits(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
        recurrent_slots: Sequence[int] | None = None,
    ) -> DeviceLogits:
        self._advance(seq_ids, [len(chunk) for chunk in chunks], recurrent_slots)
        return super().prefill_logits(seq_ids, chunks, logit_positions)

    def decode_logits(
        self,
        seq_ids: Sequence[int],
        token_ids: Sequence[int],
        recurrent_slots: Sequence[int] | None = None,
    ) -> DeviceLogits:
        self._advance(seq_ids, [1] * len(seq_ids), recurrent_slots)
        return super().decode_logits(seq_ids, token_ids)


def _engine(
    num_slots: int = 4,
    max_num_seqs: int = 4,
    num_blocks: int = 10,
    prefix_caching: bool = False,
    speculative: SpeculativeConfig | None = None,
    snapshots: bool = False,
) -> tuple[LLMEngine, HybridNullRunner]:
    runner = HybridNullRunner(num_slots, max_num_seqs, num_blocks * BLOCK_SIZE, snapshots)
    engine = LLMEngine(
        runner,  # type: ignore[arg-type]  # the runner's interface, not its class
        tokenizer=None,
        eos_token_ids=[VOCAB + 1],
        cache_config=CacheConfig(BLOCK_SIZE, num_blocks, prefix_caching, num_slots, SLOT_BYTES),
        scheduler_config=SchedulerConfig(max_num_seqs, 48, "fcfs"),
        max_model_len=num_blocks * BLOCK_SIZE,
        speculative_config=speculative,
    )
    runner.engine = engine
    return engine, runner


def test_requests_with_preemption_and_aborts_each_see_only_their_own_state() -> None:
    engine, runner = _engine()
    rng = random.Random(0)
    live: list[str] = []
    usages = set()
    for step in range(300):
        if step < 200 and rng.random() < 0.25:
            prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 70))]
            params = SamplingParams(temperature=0.0, max_tokens=rng.randint(1, 40), ignore_eos=True)
            live.append(engine.add_request(None, prompt, params))
        if live and rng.random() < 0.04:
            engine.abort_request(live.pop(rng.randrange(len(live))))
        for output in engine.step():
            if output.finished and output.request_id in live:
                live.remove(output.request_id)
        slots = engine.block_manager.recurrent_slots
        assert slots is not None
        held = [seq.recurrent_slot for seq in engine.scheduler.running]
        assert None not in held and len(set(held)) == len(held) == slots.num_used
        stats = engine.metrics.snapshot()
        assert stats.recurrent_state_usage == slots.usage
        usages.add(stats.recurrent_state_usage)
    while engine.has_unfinished:
        engine.step()
    stats = engine.metrics.snapshot()
    assert stats.num_preemptions > 0 and stats.request_success["abort"] > 0
    assert engine.block_manager.recurrent_slots.num_free == 4  # type: ignore[union-attr]
    assert stats.recurrent_state_usage == 0.0 and 1.0 in usages
    assert runner.rows_checked > 500


def test_rejected_drafts_leave_no_trace_in_the_recurrent_state() -> None:
    # The fixed logits' argmax depends on the row, so n-gram drafts of repeating prompts are
    # sometimes accepted (the state keeps them) and sometimes not (it goes back to its
    # snapshot and the accepted tokens are recomputed); every forward checks the state.
    speculative = SpeculativeConfig("ngram", 3, prompt_lookup_min=1, prompt_lookup_max=2)
    engine, runner = _engine(num_blocks=16, speculative=speculative, snapshots=True)
    rng = random.Random(1)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    for _ in range(10):
        pattern = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 3))]
        engine.add_request(None, pattern * rng.randint(2, 12), params)
    while engine.has_unfinished:
        engine.step()
    stats = engine.metrics.snapshot()
    accepted, drafted = stats.spec_decode_num_accepted_tokens, stats.spec_decode_num_draft_tokens
    assert 0 < accepted < drafted and stats.request_success["length"] == 10
    assert engine.block_manager.recurrent_slots.num_free == 4  # type: ignore[union-attr]
    assert runner.rows_checked > 50


def test_metrics_expose_the_recurrent_state_pool_only_for_models_that_keep_one() -> None:
    engine, _ = _engine(num_slots=4)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    for _ in range(3):
        engine.add_request(None, [1, 2, 3], params)
    engine.step()
    text = render(metrics_registry(engine.metrics.snapshot, "m", engine.cache_config)).decode()
    assert re.search(r'^vllm_tvm:recurrent_state_usage_perc\{model_name="m"\} 0\.75$', text, re.M)
    assert 'vllm_tvm:recurrent_state_config_info{bytes_per_slot="96",num_slots="4"} 1.0' in text
    plain = CacheConfig(BLOCK_SIZE, 10, False)
    text = render(metrics_registry(engine.metrics.snapshot, "m", plain)).decode()
    assert "recurrent_state" not in text


def test_an_engine_whose_parts_do_not_fit_the_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="prefix caching is on, but the model's runtime spec"):
        _engine(prefix_caching=True)
    with pytest.raises(ValueError, match=r"speculative decoding \(ngram\) over recurrent state"):
        _engine(speculative=SpeculativeConfig(method="ngram", num_speculative_tokens=2))
    with pytest.raises(ValueError, match="max_num_seqs 6 exceeds the 4 recurrent-state slots"):
        _engine(num_slots=4, max_num_seqs=6)


def _sizes(**kwargs: int) -> PoolSizes:
    return resolve_pool_sizes(
        block_size=BLOCK_SIZE,
        kv_bytes_per_token=10,
        default=256,
        recurrent_bytes_per_slot=1000,
        max_num_seqs=8,
        **kwargs,
    )


def test_the_state_pool_comes_out_of_the_kv_memory_budget() -> None:
    # 8 slots of 1000 bytes first, then blocks of 160 bytes from the rest.
    sizes = _sizes(kv_cache_memory=8000 + 160 * 5 + 100)
    assert (sizes.num_blocks, sizes.recurrent_slots) == (5, 8)
    plain = resolve_pool_sizes(
        block_size=BLOCK_SIZE, kv_bytes_per_token=10, default=256, kv_cache_memory=8900
    )
    assert (plain.num_blocks, plain.recurrent_slots) == (8900 // 160, 0)


def test_a_budget_short_of_max_num_seqs_slots_gets_fewer_and_caps_the_batch() -> None:
    sizes = _sizes(kv_cache_memory=3000 + 160 + 50)
    assert (sizes.num_blocks, sizes.recurrent_slots) == (1, 3)
    cache = CacheConfig(BLOCK_SIZE, sizes.num_blocks, False, sizes.recurrent_slots, 1000)
    capped = _cap_to_slots(SchedulerConfig(8, 48, "fcfs"), cache)
    assert capped.max_num_seqs == 3
    with pytest.raises(KVCacheSizeError, match="cannot hold one sequence's recurrent state"):
        _sizes(kv_cache_memory=1000 + 100)


def test_a_pool_given_in_blocks_gets_a_slot_per_sequence_beside_it() -> None:
    assert _sizes(num_blocks=12) == PoolSizes(12, 8)
    assert _sizes().recurrent_slots == 8
    assert state_bytes_per_slot(STATES) == SLOT_BYTES
