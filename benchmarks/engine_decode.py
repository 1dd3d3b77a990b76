"""Decode-only throughput of vllm-tvm through its engine, as JSON that compare.py can check.

Why: the peers' decode-only figures are taken through their engines (run_vllm.py: whole
`generate` calls, B·(N-1) / (t(N out) - t(1 out))); benchmarks/h200_llama.py times forward
calls of the model runner, which is another level. This script takes ours at the engine
level the same way (vllm_tvm.benchmarking.decode_only: `LLMEngine` steps, every batch run
once untimed first, median over repeats) and records the conditions compare.py checks
(peers/result_conditions.py). It runs wherever the engine runs: a CUDA artifact on a GPU
box, or a small model on the CPU.

Keys: decode_bB_tok_s (vLLM's definition), decode_bB_after_prefill_tok_s (tokens / seconds
of the steps after every prompt had its first token), aggregate_bB_tok_s (B·N / t(N out),
prefill included: vLLM's aggregate), raw per-run seconds under `raw`.
With `--batches 1 --input-len 128 --output-len 257`, decode_b1_tok_s is vLLM's b1 decode.
With `--ttft-requests N`, ttft_<input_len>_ms_median: the median of N lone prompts' time to
their one token (vLLM's ttft_1024_ms_median at --input-len 1024), raw seconds under `raw`.

usage: python3 benchmarks/engine_decode.py --model CONFIG_DIR [--artifact A] [--device cuda]
           [--batches 32,64,256] [--input-len 1024] [--output-len 256] [--repeats 2]
           [--max-num-batched-tokens 8192] [--num-blocks N] [--no-async-scheduling]
           [--ttft-requests 7] --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from peers.result_conditions import EACH_BATCH, model_shape

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.benchmarking.config import BenchConfig
from vllm_tvm.benchmarking.decode_only import DecodeOnly, measure_decode_only, measure_ttft
from vllm_tvm.benchmarking.engine_setup import load_bench_engine, resolve_bench_config
from vllm_tvm.benchmarking.report import host, versions
from vllm_tvm.runtime.engine.llm_engine import LLMEngine


def bench_engine(model: Path, **options: Any) -> tuple[BenchConfig, Path, LLMEngine]:
    """The engine `vllm-tvm bench` would run for `options` (token-id prompts, no progress
    bars): its checked config, resolved artifact and the loaded engine."""
    config = BenchConfig.from_options(model, pretokenize=True, show_progress=False, **options)
    config.validate()
    config = resolve_bench_config(config)
    artifact = Path(config.engine.artifact)  # type: ignore[arg-type]  # resolved above
    return config, artifact, load_bench_engine(config, artifact, config.input_len)


def decode_report(
    results: list[DecodeOnly], engine: LLMEngine, config: BenchConfig, artifact: Path
) -> dict[str, Any]:
    """The result JSON: values, their conditions, the raw seconds and the engine options."""
    manifest = read_manifest(artifact)
    report: dict[str, Any] = {
        "engine": "vllm-tvm",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "definitions": __doc__.split("Keys: ")[1].split("\n\nusage:")[0],
        "conditions": {
            "level": "engine",
            "dtype": manifest.dtype,
            "shape": model_shape(manifest.model_config),
            "warmup": EACH_BATCH,
        },
        "metric_conditions": {},
        "raw": {},
    }
    for result in results:
        workload = {
            "input_len": result.input_len,
            "output_len": result.output_len,
            "batch": result.batch,
        }
        for key, value in (
            (f"decode_b{result.batch}_tok_s", result.tok_s),
            (f"decode_b{result.batch}_after_prefill_tok_s", result.after_prefill_tok_s),
            (f"aggregate_b{result.batch}_tok_s", result.aggregate_tok_s),
        ):
            report[key] = value
            report["metric_conditions"][key] = workload
        report["raw"] |= {
            f"b{result.batch}_out{result.output_len}_s": [run.seconds for run in result.full],
            f"b{result.batch}_out1_s": [run.seconds for run in result.first],
            f"b{result.batch}_after_prefill_s_tokens": [
                [run.after_prefill_seconds, run.after_prefill_tokens] for run in result.full
            ],
        }
    report["engine_options"] = {
        "model": str(config.engine.model),
        "artifact": str(artifact),
        "target": manifest.target,
        "device": config.engine.device,
        "load_format": config.engine.load_format,
        "max_num_seqs": engine.scheduler_config.max_num_seqs,
        "max_num_batched_tokens": engine.scheduler_config.max_num_batched_tokens,
        "block_size": engine.cache_config.block_size,
        "num_blocks": engine.cache_config.num_blocks,
        "prefix_caching": engine.cache_config.enable_prefix_caching,
        "async_scheduling": engine.async_scheduling,
    }
    report |= {"host": host(), "versions": versions(), "loadavg": os.getloadavg()}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="model or config.json dir")
    parser.add_argument("--artifact", type=Path, help="compiled artifact (else compile/cache)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--load-format", default="dummy")
    parser.add_argument("--batches", default="32,64,256")
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--num-blocks", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the engine's async scheduling (default: the engine's, on for cuda)",
    )
    parser.add_argument("--ttft-requests", type=int, default=0, help="0: no TTFT measurement")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    config, artifact, engine = bench_engine(
        args.model,
        concurrency=tuple(int(b) for b in args.batches.split(",")),
        input_len=args.input_len,
        output_len=args.output_len,
        device=args.device,
        dtype=args.dtype,
        artifact=args.artifact,
        load_format=args.load_format,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_blocks=args.num_blocks,
        seed=args.seed,
        async_scheduling=args.async_scheduling,
    )
    results = measure_decode_only(
        engine, config.concurrency, config.input_len, config.output_len, args.repeats, args.seed
    )
    report = decode_report(results, engine, config, artifact)
    if args.ttft_requests:
        seconds = measure_ttft(engine, config.input_len, args.ttft_requests, args.seed)
        key = f"ttft_{config.input_len}_ms_median"
        report[key] = statistics.median(seconds) * 1e3
        report["metric_conditions"][key] = {
            "input_len": config.input_len,
            "output_len": 1,
            "batch": 1,
        }
        report["raw"][f"ttft_{config.input_len}_s"] = seconds
        print(f"TTFT@{config.input_len}: {report[key]:.2f} ms", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for result in results:
        print(
            f"b{result.batch}: decode-only {result.tok_s:,.1f} tok/s "
            f"(after prefill {result.after_prefill_tok_s:,.1f})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
