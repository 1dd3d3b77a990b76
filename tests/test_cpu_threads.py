"""TVM's CPU pool: one worker per usable CPU by default, pinned, with the documented knobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_tvm.runtime.model.cpu_threads import (
    CPU_PIN_ENV,
    CPU_THREADS_ENV,
    CPUThreadPlan,
    cgroup_cpu_limit,
    plan_cpu_threads,
)


def test_default_plan_is_every_usable_cpu_pinned() -> None:
    plan = plan_cpu_threads({}, cpus=[2, 5, 7])
    assert plan == CPUThreadPlan(cpus=(2, 5, 7), pinned=True)
    assert plan.num_threads == 3


def test_cgroup_quota_caps_the_default() -> None:
    assert plan_cpu_threads({}, cpus=[0, 1, 2, 3], cpu_limit=2).cpus == (0, 1)


def test_knobs_set_count_and_pinning() -> None:
    plan = plan_cpu_threads({CPU_THREADS_ENV: "1", CPU_PIN_ENV: "0"}, cpus=[3, 4])
    assert plan == CPUThreadPlan(cpus=(3,), pinned=False)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({CPU_THREADS_ENV: "0"}, "positive worker count"),
        ({CPU_THREADS_ENV: "two"}, "positive worker count"),
        ({CPU_THREADS_ENV: "3"}, "exceeds the 2 CPUs"),
        ({CPU_PIN_ENV: "yes"}, "expected 0 or 1"),
    ],
)
def test_bad_knob_values_fail_by_name(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        plan_cpu_threads(environ, cpus=[0, 1])
    assert next(iter(environ)) in str(raised.value)


def test_cgroup_limit_reads_v2_then_v1(tmp_path: Path) -> None:
    cpu_max, quota, period = tmp_path / "cpu.max", tmp_path / "quota", tmp_path / "period"
    missing = tmp_path / "missing"
    cpu_max.write_text("150000 100000\n")
    assert cgroup_cpu_limit(cpu_max, missing, missing) == 2
    cpu_max.write_text("max 100000\n")
    assert cgroup_cpu_limit(cpu_max, missing, missing) is None
    quota.write_text("50000\n")
    period.write_text("100000\n")
    assert cgroup_cpu_limit(missing, quota, period) == 1
    quota.write_text("-1\n")
    assert cgroup_cpu_limit(missing, quota, period) is None
    assert cgroup_cpu_limit(missing, missing, missing) is None


_POOL_PROBE = """
import json, os
from vllm_tvm.runtime.model import cpu_threads
import tvm
plan = cpu_threads.plan_cpu_threads()
cpu_threads.prepare_cpu_pool(plan)
running = cpu_threads.configure_cpu_pool(tvm, plan)
masks = []
for task in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{task}/status") as status:
        for line in status:
            if line.startswith("Cpus_allowed_list:"):
                masks.append(line.split()[1])
print(json.dumps({"running": running, "cpus": list(plan.cpus), "masks": masks}))
"""


def _probe_pool(environ: dict[str, str]) -> dict:
    """Size the pool in a fresh process (TVM sizes it once per process) and report it."""
    env = {key: value for key, value in os.environ.items() if key != CPU_THREADS_ENV}
    env.update(PYTHONPATH=os.getcwd(), **environ)
    done = subprocess.run(
        [sys.executable, "-c", _POOL_PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_pool_runs_one_pinned_worker_per_usable_cpu() -> None:
    report = _probe_pool({CPU_PIN_ENV: "1"})
    cpus = sorted(os.sched_getaffinity(0))
    assert report["running"] == len(cpus) == len(report["cpus"])
    # Every worker but the calling thread is pinned to one CPU, each to its own.
    pinned = [mask for mask in report["masks"] if mask.isdigit()]
    assert len(set(pinned)) >= len(cpus) - 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs")
def test_pool_follows_the_thread_knob() -> None:
    assert _probe_pool({CPU_THREADS_ENV: "1"})["running"] == 1
