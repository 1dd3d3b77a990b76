"""Time a cached start, `vllm-tvm generate --prompt hi --max-tokens 4` with the default model,
as a whole process, for two checkouts in turn (A B A B ...), and write every run as JSON.

Why: the start's cost is mostly imports and loading, which only a fresh process shows; the
runs alternate so that a machine whose speed drifts (a shared VM) affects both sides alike.
Each side runs with its checkout first on PYTHONPATH; the artifact must already be cached for
both (one uncounted warm-up run each makes sure of it).

    python benchmarks/cached_start.py --a . --b /path/to/other/checkout --runs 7 --out X.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMAND = ["-m", "vllm_tvm.cli.main", "generate", "--prompt", "hi", "--max-tokens", "4"]


def run_once(checkout: Path) -> dict[str, float]:
    """Wall, user, sys seconds and peak memory (MiB) of one start from `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *COMMAND],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    output = process.stdout.read() if process.stdout else b""
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"start from {checkout} failed with status {status}")
    return {
        "wall_s": round(wall, 4),
        "user_s": round(usage.ru_utime, 4),
        "sys_s": round(usage.ru_stime, 4),
        "peak_mib": round(usage.ru_maxrss / 1024, 1),
        "output": output.decode(errors="replace").strip(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (this branch)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B (the baseline)")
    parser.add_argument("--runs", type=int, default=7, help="counted runs of each side")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args()
    sides = {"a": args.a, "b": args.b}
    for checkout in sides.values():
        run_once(checkout)  # warm-up: caches filled, files in the page cache
    runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    load_before = os.getloadavg()
    for _ in range(args.runs):
        for side, checkout in sides.items():
            runs[side].append(run_once(checkout))
    medians = {
        side: {
            key: statistics.median(run[key] for run in side_runs)
            for key in ("wall_s", "user_s", "sys_s", "peak_mib")
        }
        for side, side_runs in runs.items()
    }
    result = {
        "command": "vllm-tvm " + " ".join(COMMAND[3:]),
        "checkouts": {side: str(checkout.resolve()) for side, checkout in sides.items()},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "medians": medians,
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"medians": medians, "load": result["load_average_after"]}, indent=1))


if __name__ == "__main__":
    main()
