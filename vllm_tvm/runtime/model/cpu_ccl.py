"""The CPU stand-in for NCCL: collectives among the worker threads of a disco session.

Why: TVM's disco dispatches a compiled model's collectives (`runtime.disco.allreduce`, ...)
by name to the functions of the session's CCL, and TVM ships CCLs for GPUs only (NCCL, RCCL).
A tensor-parallel artifact compiled for the CPU runs its ranks as the threads of a
`ThreadedSession`; these functions let them exchange tensors through host memory (a barrier
and numpy), so tensor parallelism is testable, and runnable with `--device cpu`, on a machine
without GPUs. It is a correctness tool, not a fast path.

How it is found: `runtime.disco.cpu_threads.init_ccl` (called through the session's
`SessionInitCCL`, as for NCCL) sizes the group. TVM records a worker's CCL name only from its
C++ CCLs, so the workers of a session set up from Python keep the empty name and the
dispatch looks up `runtime.disco..<collective>`: the collectives are registered under that
name. Supported: allreduce (sum, prod, min, max, avg), allgather (along axis 0),
broadcast_from_worker0 and sync_worker; any other collective fails in TVM by its name.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

CPU_CCL = "cpu_threads"
"""The name `SessionInitCCL` is given for this CCL."""

_DISPATCH_PREFIX = "runtime.disco.."
_REDUCERS = {0: np.sum, 1: np.prod, 2: np.min, 3: np.max, 4: np.mean}
"""TVM's ReduceKind codes (kSum, kProd, kMin, kMax, kAvg)."""


class _ThreadGroup:
    """The ranks of one session: each publishes its array, all wait, all read every one."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._barrier = threading.Barrier(world_size)
        self._slots: list[np.ndarray | None] = [None] * world_size

    def exchange(self, array: np.ndarray | None) -> list[np.ndarray | None]:
        """Every rank's array, in rank order (the second wait keeps a fast rank from
        overwriting its slot before the others read it)."""
        self._slots[_worker_rank()] = array
        self._barrier.wait()
        gathered = list(self._slots)
        self._barrier.wait()
        return gathered


_group: _ThreadGroup | None = None


def _worker_rank() -> int:
    import tvm

    return int(tvm.get_global_func("runtime.disco.worker_rank")())


def _current_group() -> _ThreadGroup:
    if _group is None:
        raise RuntimeError(f"the {CPU_CCL} CCL is used before its init_ccl")
    return _group


def _init_ccl(_session: Any, device_ids: Any) -> None:
    global _group
    _group = _ThreadGroup(len(device_ids))


def _allreduce(send: Any, kind: int, _in_group: bool, recv: Any) -> None:
    reduce = _REDUCERS.get(int(kind))
    if reduce is None:
        raise ValueError(f"unknown ReduceKind {kind}")
    parts = _current_group().exchange(send.numpy())
    stacked = np.stack([part.astype(np.float32) for part in parts])
    recv.copyfrom(reduce(stacked, axis=0).astype(parts[0].dtype))


def _allgather(send: Any, _in_group: bool, recv: Any) -> None:
    recv.copyfrom(np.concatenate(_current_group().exchange(send.numpy()), axis=0))


def _broadcast_from_worker0(send: Any, _in_group: bool, recv: Any) -> None:
    mine = send.numpy() if _worker_rank() == 0 else None
    recv.copyfrom(_current_group().exchange(mine)[0])


def _sync_worker() -> None:
    _current_group().exchange(None)


def register_cpu_ccl() -> None:
    """Register the CCL's functions with TVM (idempotent)."""
    import tvm
    import tvm_ffi

    if tvm.get_global_func(f"runtime.disco.{CPU_CCL}.init_ccl", allow_missing=True):
        return
    tvm_ffi.register_global_func(f"runtime.disco.{CPU_CCL}.init_ccl", _init_ccl)
    collectives = {
        "allreduce": _allreduce,
        "allgather": _allgather,
        "broadcast_from_worker0": _broadcast_from_worker0,
        "sync_worker": _sync_worker,
    }
    for name, function in collectives.items():
        tvm_ffi.register_global_func(_DISPATCH_PREFIX + name, function)
