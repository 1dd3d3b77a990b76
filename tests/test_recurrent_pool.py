"""The recurrent-state pool on the CPU, through TVM's runtime arrays: sized from the spec,
a slot zeroed on its own, the forward handed distinct int32 slots and every layer's pools,
a slot's snapshot restored exactly (speculative decoding)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tvm

from vllm_tvm.artifacts.manifest import ArtifactError
from vllm_tvm.artifacts.runtime_spec import RecurrentStateSpec, RuntimeSpec
from vllm_tvm.runtime.devices import target_kind_for
from vllm_tvm.runtime.kv.recurrent_pool import RecurrentStatePool
from vllm_tvm.runtime.kv.recurrent_slots import state_bytes_per_slot
from vllm_tvm.runtime.model.artifact_fit import check_runs_on

CONV_SHAPE = (3, 24)  # [K - 1, conv_dim]
SSM_SHAPE = (2, 4, 6)  # [heads_v, k_dim, v_dim]
STATES = (
    RecurrentStateSpec(
        "gated_delta_net",
        layers=3,
        conv_state_bytes=4 * int(np.prod(CONV_SHAPE)),
        ssm_state_bytes=4 * int(np.prod(SSM_SHAPE)),
    ),
)


def _filled_pool(
    num_slots: int, snapshots: bool = False
) -> tuple[RecurrentStatePool, list[np.ndarray]]:
    """A pool whose every value is set (from a seeded generator); the host copies."""
    pool = RecurrentStatePool(STATES, num_slots, tvm.cpu(), snapshots)
    rng = np.random.default_rng(0)
    host = []
    for device_pool in [*pool.conv_pools, *pool.ssm_pools]:
        values = rng.standard_normal(tuple(device_pool.shape)).astype(np.float32) + 3.0
        device_pool.copyfrom(values)
        host.append(values)
    return pool, host


def test_the_pool_holds_every_layer_at_the_spec_bytes() -> None:
    pool = RecurrentStatePool(STATES, 5, tvm.cpu())
    assert len(pool.conv_pools) == len(pool.ssm_pools) == 3
    assert pool.nbytes == 5 * state_bytes_per_slot(STATES)
    assert all(p.dtype == "float32" and p.device == tvm.cpu() for p in pool.conv_pools)


def test_a_restored_snapshot_is_the_state_saved_and_touches_no_other_slot() -> None:
    pool, before = _filled_pool(3, snapshots=True)
    assert pool.nbytes == 2 * 3 * state_bytes_per_slot(STATES)
    pool.save(1)
    for device_pool in [*pool.conv_pools, *pool.ssm_pools]:  # a verify forward's update
        values = device_pool.numpy()
        values[1] = -1.0
        device_pool.copyfrom(values)
    pool.restore(1)
    for device_pool, values in zip([*pool.conv_pools, *pool.ssm_pools], before, strict=True):
        np.testing.assert_array_equal(device_pool.numpy()[:3], values[:3])
    with pytest.raises(ValueError, match="keeps no snapshots"):
        RecurrentStatePool(STATES, 2, tvm.cpu()).save(0)


def test_zeroing_a_slot_clears_it_in_every_pool_and_nothing_else() -> None:
    pool, before = _filled_pool(4)
    pool.zero_slot(2)
    for device_pool, values in zip([*pool.conv_pools, *pool.ssm_pools], before, strict=True):
        after = device_pool.numpy()
        assert not after[2].any()
        np.testing.assert_array_equal(np.delete(after, 2, axis=0), np.delete(values, 2, axis=0))


def test_the_forward_gets_int32_slots_and_the_pools_in_spec_order() -> None:
    pool, _ = _filled_pool(4)
    state = pool.forward_state([3, 0, 2])
    assert state.slots.dtype == "int32"
    np.testing.assert_array_equal(state.slots.numpy(), [3, 0, 2])
    assert all(p.same_as(q) for p, q in zip(state.conv_pools, pool.conv_pools, strict=True))
    assert all(p.same_as(q) for p, q in zip(state.ssm_pools, pool.ssm_pools, strict=True))
    with pytest.raises(ValueError, match=r"distinct, got \[1, 1\]"):
        pool.forward_state([1, 1])


def test_a_slot_row_is_the_layer_state_shape_seen_in_place() -> None:
    pool, host = _filled_pool(2)
    conv = RecurrentStatePool.views(pool.conv_pools, CONV_SHAPE)
    ssm = RecurrentStatePool.views(pool.ssm_pools, SSM_SHAPE)
    assert tuple(conv[0].shape) == (2, *CONV_SHAPE) and tuple(ssm[2].shape) == (2, *SSM_SHAPE)
    np.testing.assert_array_equal(ssm[1].numpy(), host[3 + 1].reshape(2, *SSM_SHAPE))
    with pytest.raises(ValueError, match="cannot be seen as"):
        RecurrentStatePool.views(pool.conv_pools, (5, 5))


def test_states_that_are_not_whole_fp32_values_are_refused_by_name() -> None:
    odd = (RecurrentStateSpec("gated_delta_net", 1, conv_state_bytes=6, ssm_state_bytes=8),)
    with pytest.raises(ValueError, match="gated_delta_net conv state of 6 bytes"):
        RecurrentStatePool(odd, 2, tvm.cpu())


def test_a_slot_outside_the_pool_is_refused() -> None:
    with pytest.raises(IndexError, match="slot 4 is outside the pool's 4 slots"):
        RecurrentStatePool(STATES, 4, tvm.cpu()).zero_slot(4)


def test_the_runner_sizes_its_pool_from_its_spec_on_its_device(make_llm) -> None:
    runner = make_llm().runner
    assert runner.recurrent_pool is None  # a model without recurrent state has none
    runner.spec = replace(runner.spec, recurrent_state=STATES)
    runner.resize_recurrent_pool(3)
    pool = runner.recurrent_pool
    assert pool is not None and pool.num_slots == 3 and pool.device == runner.device
    assert pool.nbytes == 3 * state_bytes_per_slot(STATES)
    runner.resize_recurrent_pool(0)
    assert runner.recurrent_pool is None


def test_an_artifact_with_recurrent_state_runs_on_one_device_not_tensor_parallel() -> None:
    spec = RuntimeSpec(8, 4, 1, 64, attention=(), recurrent_state=STATES)
    manifest = SimpleNamespace(target_kind=target_kind_for("cpu"), target="llvm", runtime=spec)
    check_runs_on(manifest, Path("tiny"), "cpu")  # type: ignore[arg-type]
    with pytest.raises(
        ArtifactError, match=r"recurrent state \(gated_delta_net\).*tensor-parallel runner"
    ):
        check_runs_on(manifest, Path("tiny"), "cpu", runs_recurrent_state=False)  # type: ignore[arg-type]


def test_the_pool_holds_the_pools_a_forward_returned() -> None:
    pool = RecurrentStatePool(STATES, 2, tvm.cpu())
    returned = [
        [tvm.runtime.empty(tuple(p.shape), "float32") for p in pools]
        for pools in (pool.conv_pools, pool.ssm_pools)
    ]
    pool.take_back(*returned)
    state = pool.forward_state([1])
    assert all(p.same_as(q) for p, q in zip(state.conv_pools, returned[0], strict=True))
    assert all(p.same_as(q) for p, q in zip(state.ssm_pools, returned[1], strict=True))
    with pytest.raises(ValueError, match="different number of state pools"):
        pool.take_back(returned[0][:1], returned[1])
