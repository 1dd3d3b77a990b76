"""`run_benchmark`: one engine, a warm-up at every concurrency, one measured level per
concurrency.

Why it exists: the order is part of what the numbers mean. Everything that is not serving
(compiling, loading, making and tokenizing prompts, sizing the pool, warming up) happens
before the first clock starts; then each level runs on the same engine with its prefix cache
emptied. The warm-up runs, for each concurrency C of the sweep, C full-length prompts at once
with a few output tokens, so every batch size the levels run at has run once untimed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from vllm_tvm.artifact_registry.resolve import RegistrySettings
from vllm_tvm.artifacts.manifest import Manifest, read_manifest
from vllm_tvm.benchmarking.config import BenchConfig, check_fits
from vllm_tvm.benchmarking.engine_setup import load_bench_engine, resolve_bench_config
from vllm_tvm.benchmarking.metrics import LevelMetrics, mean_acceptance_length, summarize_level
from vllm_tvm.benchmarking.report import BenchReport, host, versions
from vllm_tvm.benchmarking.runner import (
    WARMUP_OUTPUT_LEN,
    bench_sampling_params,
    run_level,
    warm_up,
)
from vllm_tvm.benchmarking.workload import Workload, build_workload, random_prompt_ids
from vllm_tvm.entrypoints.resolve import BeforeLoad
from vllm_tvm.runtime.engine.llm_engine import LLMEngine

LevelCallback = Callable[[LevelMetrics], None]


def run_benchmark(
    config: BenchConfig,
    on_level: LevelCallback | None = None,
    registry: RegistrySettings | None = None,
    before_load: BeforeLoad | None = None,
) -> BenchReport:
    """Run the sweep of `config`; `on_level` is called with each level as it completes.
    `registry` and `before_load` go to the resolve step (entrypoints/resolve.py).

    Raises ValueError (or FileNotFoundError) naming the bad value before anything loads when
    an option cannot work, and after loading when the prompts do not fit the engine's
    serving length.
    """
    config.validate()
    started = time.perf_counter()
    config = resolve_bench_config(config, registry, before_load)
    artifact = Path(config.engine.artifact)  # type: ignore[arg-type]  # resolved above
    compiled = time.perf_counter()
    manifest = read_manifest(artifact)
    workload = _workload(config, manifest)
    if config.engine.max_model_len is not None:
        check_fits(workload.max_prompt_len, config.output_len, config.engine.max_model_len)
    prepared = time.perf_counter()
    engine = load_bench_engine(config, artifact, workload.max_prompt_len)
    loaded = time.perf_counter()
    check_fits(workload.max_prompt_len, config.output_len, engine.max_model_len)

    # Full-length warm-up prompts, C at once for each level's C: the first forward of a new
    # size pays one-time setup (cuBLASLt's algorithm choice per row count, first allocations
    # of that size: ≈ 10 ms on the H200 for a 1,024-token prefill), which must not land in
    # a measured TTFT or TPOT.
    warmup_len = workload.max_prompt_len
    warmup_params = bench_sampling_params(min(WARMUP_OUTPUT_LEN, config.output_len))
    vocab_size = engine.runner.vocab_size
    for concurrency in config.concurrency:
        prompts = random_prompt_ids(concurrency, warmup_len, vocab_size, config.seed + 1)
        warm_up(engine, prompts, warmup_params)
    warmed = time.perf_counter()

    params = bench_sampling_params(config.output_len, config.temperature)
    report = BenchReport(
        conditions=_conditions(config, manifest, artifact, engine, workload, warmup_len),
        setup_seconds={
            "compile_or_resolve": round(compiled - started, 3),
            "workload": round(prepared - compiled, 3),
            "load": round(loaded - prepared, 3),
            "warmup": round(warmed - loaded, 3),
        },
    )
    for concurrency in config.concurrency:
        prompts = workload.prompts[: config.prompts_for(concurrency)]
        before = engine.metrics.snapshot()
        run = run_level(engine, prompts, concurrency, params)
        level = summarize_level(run.concurrency, run.timings, run.duration)
        acceptance = mean_acceptance_length(before, engine.metrics.snapshot())
        level = replace(level, mean_acceptance_length=acceptance)
        report.levels.append(level)
        if on_level is not None:
            on_level(level)
    return report


def _workload(config: BenchConfig, manifest: Manifest) -> Workload:
    """Every prompt the sweep sends (the longest level's count), made and tokenized now."""
    tokenizer = None
    if config.needs_tokenizer:
        from vllm_tvm.runtime.tokenization import load_tokenizer

        tokenizer = load_tokenizer(config.engine.model)
    count = max(config.prompts_for(concurrency) for concurrency in config.concurrency)
    return build_workload(config, count, int(manifest.model_config["vocab_size"]), tokenizer)


def _conditions(
    config: BenchConfig,
    manifest: Manifest,
    artifact: Path,
    engine: LLMEngine,
    workload: Workload,
    warmup_len: int,
) -> dict[str, Any]:
    """Everything a reader needs to reproduce or compare the numbers (`level` "engine":
    requests through the engine's step loop, as benchmarks/peers/compare.py reads it)."""
    machine = host()
    options = config.engine
    device_name = engine.runner.device.device_name if options.device == "cuda" else machine["cpu"]
    return {
        "level": "engine",
        "model": str(options.model),
        "model_name": Path(options.model).name,
        "architecture": manifest.architecture,
        "model_config": manifest.model_config,
        "load_format": options.load_format,
        "device": options.device,
        "device_name": device_name,
        "dtype": manifest.dtype,
        "weight_format": options.weight_format,
        "quantization": manifest.quantization,
        "cpu_int8_activations": manifest.cpu_int8_activations,
        "target": manifest.target,
        "artifact": str(artifact),
        "workload": workload.source,
        "input_len": config.input_len,
        "output_len": config.output_len,
        "max_prompt_len": workload.max_prompt_len,
        "concurrency": list(config.concurrency),
        "num_prompts": [config.prompts_for(c) for c in config.concurrency],
        "pretokenize": config.pretokenize,
        "pretokenize_mode": config.pretokenize_mode,
        "tokenizer_loaded": engine.tokenizer is not None,
        "temperature": config.temperature,
        "ignore_eos": True,
        "seed": config.seed,
        "max_model_len": engine.max_model_len,
        "max_num_seqs": engine.scheduler_config.max_num_seqs,
        "max_num_batched_tokens": engine.scheduler_config.max_num_batched_tokens,
        "block_size": engine.cache_config.block_size,
        "num_blocks": engine.cache_config.num_blocks,
        "prefix_caching": engine.cache_config.enable_prefix_caching,
        "speculative_config": None
        if options.speculative_config is None
        else asdict(options.speculative_config),
        "warmup": {
            "prompt_len": warmup_len,
            "output_len": min(WARMUP_OUTPUT_LEN, config.output_len),
            "concurrency": list(config.concurrency),
        },
        "host": machine,
        "versions": versions(),
    }
