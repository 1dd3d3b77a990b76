"""Where one warm batch-1 decode step of the default model spends its time, by phase.

Why: on these shared 2-core machines a tokens-per-second figure is mostly the load's; the
share of each phase of a step, measured in the same process and the same minutes, says what
is worth making faster. The step is the runner-level one cpu_peers.py times (token embedding,
`begin_forward`, the compiled `decode_single`, `end_forward`, the compiled argmax and its
copy to the host); each phase is timed with the wall clock and with this process's CPU time
(both workers of TVM's pool count, including their spinning at the pool's barrier).
`--kernels` adds a pass that splits `decode_single` by the Relax VM's calls (compiled
kernels and VM builtins), timed by the VM's instrument hook; the hook's Python costs
inflate every call equally, so read its shares, not its milliseconds.

usage: python3 benchmarks/cpu_decode_profile.py [--context 64] [--steps 64] [--repeats 5] [--gguf F]
           [--cpu-int8-activations on|off]
           [--kernels] [--out benchmarks/results/X.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from cpu_peers import INT8_DEFAULT, default_gguf
from cpu_quant_gemv import write_report

PHASES = ("embed", "begin_forward", "decode_single", "end_forward", "argmax")


def _timed(totals: dict[str, list[float]], phase: str, call: Callable[[], Any]) -> Any:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    totals[phase][0] += time.perf_counter() - wall
    totals[phase][1] += time.process_time() - cpu
    return result


def runner_for(gguf: Path, length: int, int8: str = INT8_DEFAULT) -> Any:
    """Our model runner of `gguf` (its cached artifact, compiled on first use, with
    `--cpu-int8-activations int8`) for one sequence of up to `length` tokens, prefilled in
    one chunk."""
    from vllm_tvm.entrypoints.resolve import artifact_for
    from vllm_tvm.runtime.engine.args import EngineArgs
    from vllm_tvm.runtime.model.runner import ModelRunner

    return ModelRunner(
        artifact_for(EngineArgs(model=str(gguf), cpu_int8_activations=int8)),
        gguf,
        max_model_len=length,
        max_total_seq_len=2 * length,
        prefill_chunk_size=length,
        show_progress=False,
    )


def profile(args: argparse.Namespace) -> dict[str, Any]:
    """Per-phase wall and CPU seconds per step, one dict per repeat."""
    gguf = args.gguf or default_gguf()
    runner = runner_for(gguf, args.context + args.steps + 1, args.cpu_int8_activations)
    rng = np.random.default_rng(0)
    prompt = rng.integers(100, runner.vocab_size, size=args.context).tolist()
    kv = runner.kv_cache
    repeats = []
    for repeat in range(args.repeats + 1):  # the first repeat warms up and is left out
        kv.add_sequence(repeat)
        token = int(runner.prefill_logits([repeat], [prompt]).argmax()[0])
        totals = {phase: [0.0, 0.0] for phase in PHASES}
        step_wall, step_cpu = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            ids = _timed(totals, "embed", lambda t=token: runner.embed_tokens([t]))
            hidden = ids._create_view((1, 1, runner.hidden_size))
            _timed(totals, "begin_forward", lambda r=repeat: kv.begin_forward([r], [1]))
            logits, _ = _timed(
                totals,
                "decode_single",
                lambda h=hidden: runner.vm["decode_single"](h, kv.handle, runner.params),
            )
            _timed(totals, "end_forward", kv.end_forward)
            rows = runner._device_logits(logits, 1)
            token = int(_timed(totals, "argmax", rows.argmax)[0])
        step = {
            "wall_s": (time.perf_counter() - step_wall) / args.steps,
            "cpu_s": (time.process_time() - step_cpu) / args.steps,
        }
        kv.remove_sequence(repeat)
        if repeat == 0:
            continue
        per_step = {
            p: {"wall_s": w / args.steps, "cpu_s": c / args.steps} for p, (w, c) in totals.items()
        }
        repeats.append({"step": step, "phases": per_step, "load_average": os.getloadavg()})
    result = {"threads": runner.cpu_threads, "repeats": repeats}
    if args.kernels:
        result["kernels"] = kernel_shares(runner, prompt, args.steps)
    return result


def instrumented_calls(runner: Any, work: Callable[[], Any]) -> dict[str, list[float]]:
    """Per VM call symbol during `work()`: [calls, CPU seconds, wall seconds], by the VM's
    instrument hook (CPU over wall near the pool's thread count: the call kept every
    worker busy)."""
    totals: dict[str, list[float]] = {}
    started: list[float] = []

    def instrument(func: Any, symbol: str, before: bool, ret: Any, *args: Any) -> int:
        if before:
            started[:] = [time.process_time(), time.perf_counter()]
        else:
            entry = totals.setdefault(symbol, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += time.process_time() - started[0]
            entry[2] += time.perf_counter() - started[1]
        return 0

    runner.vm.set_instrument(instrument)
    try:
        work()
    finally:
        runner.vm.set_instrument(None)
    return totals


def per_symbol(totals: dict[str, list[float]], per: int) -> dict[str, Any]:
    """`totals` per unit of work (`per` units ran): calls, CPU ms and share of CPU, largest
    first."""
    whole = sum(cpu for _, cpu, _ in totals.values())
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])
    return {
        symbol: {
            "calls_per_step": n / per,
            "cpu_ms": cpu / per * 1e3,
            "wall_ms": wall / per * 1e3,
            "share": cpu / whole,
        }
        for symbol, (n, cpu, wall) in ranked
    }


def vm_call_shares(runner: Any, forward: Callable[[], Any], calls: int) -> dict[str, Any]:
    """Per VM call symbol over `calls` runs of `forward`: calls, CPU ms per run and share."""

    def work() -> None:
        for _ in range(calls):
            forward()

    return per_symbol(instrumented_calls(runner, work), calls)


def kernel_shares(runner: Any, prompt: list[int], steps: int) -> dict[str, Any]:
    """Per VM call symbol of `decode_single`: calls, CPU ms per step and share of CPU."""
    seq = 1 << 20
    runner.kv_cache.add_sequence(seq)
    token = int(runner.prefill_logits([seq], [prompt]).argmax()[0])

    def decode() -> None:
        nonlocal token
        for _ in range(steps):
            token = int(runner.decode_logits([seq], [token]).argmax()[0])

    totals = instrumented_calls(runner, decode)
    runner.kv_cache.remove_sequence(seq)
    return per_symbol(totals, steps)


def summarize(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Median per phase over repeats, in ms, with each phase's share of the step."""
    step_wall = statistics.median(r["step"]["wall_s"] for r in repeats)
    step_cpu = statistics.median(r["step"]["cpu_s"] for r in repeats)
    summary: dict[str, Any] = {"step_wall_ms": step_wall * 1e3, "step_cpu_ms": step_cpu * 1e3}
    for phase in PHASES:
        wall = statistics.median(r["phases"][phase]["wall_s"] for r in repeats)
        cpu = statistics.median(r["phases"][phase]["cpu_s"] for r in repeats)
        summary[phase] = {
            "wall_ms": wall * 1e3,
            "cpu_ms": cpu * 1e3,
            "wall_share": wall / step_wall,
            "cpu_share": cpu / step_cpu,
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--context", type=int, default=64, help="prompt tokens before decoding")
    parser.add_argument("--steps", type=int, default=64, help="decode steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", action="store_true", help="add the per-call split")
    parser.add_argument("--gguf", type=Path, default=None, help="default: the default model")
    parser.add_argument("--cpu-int8-activations", default=INT8_DEFAULT)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    result = profile(args)
    report = write_report(args, load_before, summary=summarize(result["repeats"]), **result)
    print(json.dumps(report["summary"], indent=1))
    for symbol, share in report.get("kernels", {}).items():
        print(
            f"{symbol:55s} {share['calls_per_step']:6.1f} {share['share']:7.1%}"
            f" cpu {share['cpu_ms']:7.3f} wall {share['wall_ms']:7.3f} ms",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
