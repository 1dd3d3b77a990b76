"""Size and pin TVM's CPU worker pool to the cores this process may actually use.

Why: left alone, TVM sizes its pool once, when it is first used, to half of
`std::thread::hardware_concurrency()` on x86-64 (it assumes every core has an SMT sibling), and
it ignores the process's affinity mask and cgroup quota. On a 2-vCPU VM that is ONE worker, so
every compiled kernel runs on one core while llama.cpp uses both. Here the pool gets one worker
per usable CPU (the affinity mask, capped by a cgroup CPU quota), each pinned to its own CPU so
the workers do not migrate between caches.

The knob, read once per process before the pool exists: `VLLM_TVM_CPU_THREADS` = a worker count
(default: every usable CPU); `VLLM_TVM_CPU_PIN=0` lets the workers float over the usable CPUs
instead of pinning one to each (better when other busy processes share the cores).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CPU_THREADS_ENV = "VLLM_TVM_CPU_THREADS"
CPU_PIN_ENV = "VLLM_TVM_CPU_PIN"

_TVM_THREADS_ENV = "TVM_NUM_THREADS"
"""Read by TVM when its pool is created: the number of workers it starts."""

_ONE_CPU_PER_WORKER = -2
_WORKERS_SHARE_CPUS = -3
"""TVM's `AffinityMode` values (src/runtime/threading_backend.cc) for an explicit CPU list."""

_CGROUP_V2_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
_CGROUP_V1_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
_CGROUP_V1_PERIOD = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")


@dataclass(frozen=True)
class CPUThreadPlan:
    """The CPUs the pool's workers run on (one worker each) and whether each is pinned."""

    cpus: tuple[int, ...]
    pinned: bool

    @property
    def num_threads(self) -> int:
        return len(self.cpus)


def cgroup_cpu_limit(
    cpu_max: Path = _CGROUP_V2_CPU_MAX,
    v1_quota: Path = _CGROUP_V1_QUOTA,
    v1_period: Path = _CGROUP_V1_PERIOD,
) -> int | None:
    """Whole CPUs the cgroup's quota allows (rounded up), or None when there is no quota."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota, period = v1_quota.read_text().strip(), v1_period.read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask), in order."""
    return sorted(os.sched_getaffinity(0))


def plan_cpu_threads(
    environ: Mapping[str, str] = os.environ,
    cpus: list[int] | None = None,
    cpu_limit: int | None = None,
) -> CPUThreadPlan:
    """The worker plan from the environment knobs, the affinity mask and the cgroup quota.

    Raises:
        ValueError: `VLLM_TVM_CPU_THREADS` is not a positive integer, asks for more workers than
            there are usable CPUs, or `VLLM_TVM_CPU_PIN` is neither 0 nor 1.
    """
    cpus = usable_cpus() if cpus is None else cpus
    default = min(len(cpus), cpu_limit) if cpu_limit else len(cpus)
    requested = environ.get(CPU_THREADS_ENV, "").strip()
    if not requested:
        count = default
    elif not requested.isdigit() or int(requested) < 1:
        raise ValueError(f"{CPU_THREADS_ENV}={requested!r}: expected a positive worker count")
    elif int(requested) > len(cpus):
        raise ValueError(
            f"{CPU_THREADS_ENV}={requested} exceeds the {len(cpus)} CPUs this process may use "
            f"({','.join(map(str, cpus))})"
        )
    else:
        count = int(requested)
    pin = environ.get(CPU_PIN_ENV, "1").strip()
    if pin not in ("0", "1"):
        raise ValueError(f"{CPU_PIN_ENV}={pin!r}: expected 0 or 1")
    return CPUThreadPlan(cpus=tuple(cpus[:count]), pinned=pin == "1")


def prepare_cpu_pool(plan: CPUThreadPlan) -> None:
    """Tell TVM how many workers to start; must run before its pool is first used."""
    os.environ[_TVM_THREADS_ENV] = str(plan.num_threads)


def configure_cpu_pool(tvm: Any, plan: CPUThreadPlan) -> int:
    """Apply `plan` to TVM's pool; returns the workers it now runs.

    When the pool was already created smaller in this process (before `prepare_cpu_pool`), TVM
    cannot grow it: that is logged and the smaller pool is used.
    """
    mode = _ONE_CPU_PER_WORKER if plan.pinned else _WORKERS_SHARE_CPUS
    cpus = [str(cpu) for cpu in plan.cpus]
    tvm.get_global_func("runtime.config_threadpool")(mode, plan.num_threads, cpus)
    running = int(tvm.get_global_func("runtime.NumThreads")())
    if running < plan.num_threads:
        logger.warning(
            "TVM's CPU pool runs %d workers, not %d: it was created before %s was applied",
            running,
            plan.num_threads,
            CPU_THREADS_ENV,
        )
    return running
