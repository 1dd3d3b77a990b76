"""What the isolated CPU kernel benchmarks (cpu_attention_kernel.py, cpu_silu_mul.py,
cpu_rope_kernel.py) share: TVM's worker pool sized and pinned as the model runner sizes it,
the alternating timing of several kernels, and the report's common fields.

Why one place: the three compare our kernel with the one it replaced under the same
conditions; timing them the same way keeps their figures comparable.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tvm
from cpu_peers import machine, versions

from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.runtime.model.cpu_threads import (
    configure_cpu_pool,
    plan_cpu_threads,
    prepare_cpu_pool,
)


def cpu_pool_and_target() -> dict[str, Any]:
    """The load before, TVM's worker pool (planned, pinned, its worker count) and this
    CPU's llvm target, as the report's `load_average_before`, `workers` and `target`."""
    load_before = os.getloadavg()
    plan = plan_cpu_threads()
    prepare_cpu_pool(plan)
    workers = configure_cpu_pool(tvm, plan)
    target = resolve_target("llvm").make_target()
    return {"load_average_before": load_before, "workers": workers, "target": target}


def alternating_times(
    calls: dict[str, Callable[[], None]], repeats: int
) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, float]]]:
    """Each call once untimed, then `repeats` rounds of all of them in turn: the raw wall
    and CPU seconds per call, and their medians."""
    raw: dict[str, dict[str, list[float]]] = {name: {"wall_s": [], "cpu_s": []} for name in calls}
    for repeat in range(repeats + 1):
        for name, call in calls.items():
            wall, cpu = time.perf_counter(), time.process_time()
            call()
            if repeat:
                raw[name]["wall_s"].append(time.perf_counter() - wall)
                raw[name]["cpu_s"].append(time.process_time() - cpu)
    medians = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in raw.items()}
    return raw, medians


def write_report(
    out: Path, doc: str, setup: dict[str, Any], fields: dict[str, Any], results: Any
) -> None:
    """The report: date, the script's definitions (its docstring before `usage:`), the
    conditions of `setup` (cpu_pool_and_target), the script's own `fields`, the machine and
    versions, then `results`."""
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "definitions": doc.split("\n\nusage:")[0],
        **fields,
        "workers": setup["workers"],
        "target": str(setup["target"]),
        "load_average_before": setup["load_average_before"],
        "machine": machine(),
        "versions": versions(),
        "results": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
