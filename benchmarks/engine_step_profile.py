"""Where an engine-level decode step's time goes: the host's Python profile and, on CUDA, the
device timeline of the same steps.

Why: the runner-level timeline (h200_step_timeline.py) leaves out the engine (scheduler,
block tables, sampling dispatch, stop rules, outputs), and on the H200 the engine-level
decode step at batch 256 was ≈ 5 ms longer than the runner-level one. This script runs the
engine as `vllm-tvm bench` does (dummy weights, token-id prompts, streamed outputs), brings
a batch past its prefills, then times `--steps` pure decode steps three ways: plain wall
time, under cProfile (the host functions that cost the most), and, on CUDA, under CUPTI
(GPU-busy time and the idle gaps per step, where the device waits for the host).

usage: python3 benchmarks/engine_step_profile.py --model CONFIG_DIR [--artifact A]
           [--device cuda] [--batches 64,256] [--input-len 1024] [--steps 30]
           [--no-async-scheduling] --out FILE.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

from engine_decode import bench_engine

from vllm_tvm.benchmarking.report import host, versions
from vllm_tvm.benchmarking.runner import bench_sampling_params
from vllm_tvm.benchmarking.workload import random_prompt_ids
from vllm_tvm.runtime.engine.llm_engine import LLMEngine


def start_batch(engine: LLMEngine, batch: int, input_len: int, steps: int, seed: int) -> None:
    """Add `batch` requests and step until each has its first token (no prefill left)."""
    prompts = random_prompt_ids(batch, input_len, engine.runner.vocab_size, seed)
    params = bench_sampling_params(3 * steps + 16)
    engine.reset_prefix_cache()
    for index, prompt in enumerate(prompts):
        engine.add_request(f"profile-{seed}-{index}", prompt, params, output_kind="delta")
    started: set[str] = set()
    while len(started) < batch:
        started.update(output.request_id for output in engine.step())


def host_profile(engine: LLMEngine, steps: int, top: int = 30) -> dict[str, Any]:
    """cProfile over `steps` steps: the functions with the most own and cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        engine.step()
    profiler.disable()
    report: dict[str, Any] = {}
    for key in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(top)
        report[key] = text.getvalue().splitlines()
    return report


def wall_ms_per_step(engine: LLMEngine, steps: int) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        engine.step()
    return (time.perf_counter() - started) / steps * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--artifact", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="64,256")
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--max-num-batched-tokens", type=int, default=16384)
    parser.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    batches = tuple(int(b) for b in args.batches.split(","))
    _, _, engine = bench_engine(
        args.model,
        concurrency=batches,
        input_len=args.input_len,
        output_len=3 * args.steps + 16,
        device=args.device,
        artifact=args.artifact,
        load_format="dummy",
        max_num_batched_tokens=args.max_num_batched_tokens,
        async_scheduling=args.async_scheduling,
    )
    report: dict[str, Any] = {
        "conditions": {
            "level": "engine",
            "input_len": args.input_len,
            "steps": args.steps,
            "async_scheduling": engine.async_scheduling,
            "outputs": "delta (streamed)",
        },
        "host": host(),
        "versions": versions(),
    }
    for seed, batch in enumerate(batches):
        start_batch(engine, batch, args.input_len, args.steps, seed)
        wall_ms_per_step(engine, 5)  # warm: first decode row counts, block growth
        entry: dict[str, Any] = {"wall_ms_per_step": round(wall_ms_per_step(engine, args.steps), 4)}
        entry["host_profile"] = host_profile(engine, args.steps)
        if args.device == "cuda":
            from h200_step_timeline import timeline

            entry["device_timeline"] = timeline(engine.step, args.steps)
        engine.abort_all()
        while engine.has_unfinished:
            engine.step()
        report[f"decode_b{batch}"] = entry
        print(f"b{batch}: {entry['wall_ms_per_step']} ms per engine step", flush=True)
        if "device_timeline" in entry:
            device = entry["device_timeline"]
            print("  device:", json.dumps({key: device[key] for key in list(device)[:6]}))
        print("\n".join(entry["host_profile"]["tottime"][:45]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
