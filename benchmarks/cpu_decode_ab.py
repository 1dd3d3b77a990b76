"""Batch-1 decode steps of a model from two or more source trees, interleaved, in CPU time.

Why: a change to the compiled kernels is judged by the whole decode step, and on these shared
2-core machines only an interleaved comparison in CPU time means anything. Each round runs
cpu_decode_profile.py once per tree (A B, B A, ...), each in a fresh process importing
`vllm_tvm` from its tree (so each compiles or finds its own artifact), and keeps the per-step
CPU and wall medians of every run with the load average around it. A tree given as
NAME=PATH@CHOICE builds with `--cpu-int8-activations CHOICE` (one tree may so appear twice,
on and off); the ratios are the first tree's over each other's.

usage: [VLLM_TVM_CPU_THREADS=1] python3 benchmarks/cpu_decode_ab.py --tree before=/path/a
           --tree after=/path/b[@on] [--rounds 4] [--steps 32] [--context 64] [--gguf F]
           --out X.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from cpu_peers import machine

from vllm_tvm.runtime.model.cpu_threads import CPU_THREADS_ENV

HERE = Path(__file__).resolve().parent


def run(spec: str, args: argparse.Namespace) -> dict:
    """One profile run with `vllm_tvm` imported from the tree of `spec` (PATH[@CHOICE]):
    its summary and load."""
    tree, _, int8 = spec.partition("@")
    # The tree's own profile script: it puts its tree first on sys.path (through cpu_peers),
    # so PYTHONPATH alone would not choose which vllm_tvm it imports.
    script = Path(tree) / "benchmarks" / "cpu_decode_profile.py"
    command = [sys.executable, str(script), "--repeats", "3"]
    command += ["--steps", str(args.steps), "--context", str(args.context)]
    command += ["--cpu-int8-activations", int8] if int8 else []
    command += ["--gguf", str(args.gguf)] if args.gguf else []
    load_before = os.getloadavg()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": tree},
        check=True,
    )
    summary = json.loads(done.stdout[done.stdout.index("{") :])
    return {"summary": summary, "load_before": load_before, "load_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH[@CHOICE]")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--gguf", type=Path, default=None, help="default: the default model")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.tree)
    for tree in trees.values():  # compile (or find) each tree's artifact before timing
        run(tree, argparse.Namespace(steps=1, context=1, gguf=args.gguf))
    rounds = []
    for index in range(args.rounds):
        order = list(trees) if index % 2 == 0 else list(reversed(trees))
        record = {"order": order, **{name: run(trees[name], args) for name in order}}
        rounds.append(record)
        print(index, {n: round(record[n]["summary"]["step_cpu_ms"], 2) for n in order}, flush=True)
    first, *others = list(trees)

    def ratios(key: str, other: str) -> list[float]:
        return [r[first]["summary"][key] / r[other]["summary"][key] for r in rounds]

    ratio_rows = {}
    for other in others:
        for kind, key in (("cpu", "step_cpu_ms"), ("wall", "step_wall_ms")):
            values = ratios(key, other)
            ratio_rows[f"{kind}_ratio_{first}_over_{other}"] = {
                "median": statistics.median(values),
                "rounds": values,
            }
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "trees": trees,
        "settings": {
            "rounds": args.rounds,
            "steps": args.steps,
            "context": args.context,
            "gguf": str(args.gguf) if args.gguf else "default model",
            CPU_THREADS_ENV: os.environ.get(CPU_THREADS_ENV, "default: every usable CPU"),
        },
        **ratio_rows,
        "rounds": rounds,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if "ratio" in k}, indent=1))


if __name__ == "__main__":
    main()
