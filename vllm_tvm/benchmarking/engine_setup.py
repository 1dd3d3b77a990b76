"""From a `BenchConfig` to a loaded engine: the artifact, the KV pool size, the engine.

Why it exists: a benchmark engine differs from a serving one in two ways that are easy to
get wrong. Its KV pool is sized from the workload (every request in flight at the largest
concurrency holds its whole sequence, so no level is slowed by preemption unless the user
asks for a smaller pool), and it loads no tokenizer unless the workload needs one, so a
config.json-only directory with dummy weights is enough.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from vllm_tvm.artifact_registry.resolve import RegistrySettings
from vllm_tvm.benchmarking.config import BenchConfig
from vllm_tvm.entrypoints.resolve import BeforeLoad, resolve_engine
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.llm_engine import LLMEngine


def resolve_bench_config(
    config: BenchConfig,
    registry: RegistrySettings | None = None,
    before_load: BeforeLoad | None = None,
) -> BenchConfig:
    """`config` with its engine resolved (entrypoints/resolve.py: the checkpoint, a draft's
    artifact and the target's, compiled on first use)."""
    return replace(config, engine=resolve_engine(config.engine, registry, before_load))


def default_num_blocks(config: BenchConfig, max_prompt_len: int) -> int:
    """KV blocks for the largest concurrency's requests at full length (prompt + output),
    and at least one sequence of `max_model_len` when it is given."""
    block_size = config.engine.block_size
    per_sequence = math.ceil((max_prompt_len + config.output_len) / block_size)
    blocks = per_sequence * max(config.concurrency)
    if config.engine.max_model_len is not None:
        blocks = max(blocks, math.ceil(config.engine.max_model_len / block_size))
    return blocks


def bench_engine_args(config: BenchConfig, artifact: Path, max_prompt_len: int) -> EngineArgs:
    """The engine options of a benchmark run: the config's (resolved, `resolve_bench_config`),
    on `artifact`, with the KV pool sized for the workload unless the config sizes it, and a
    tokenizer only when the workload needs one."""
    num_blocks = config.engine.num_blocks
    if num_blocks is None and not config.engine.sized_from_memory:
        num_blocks = default_num_blocks(config, max_prompt_len)
    return replace(
        config.engine,
        artifact=artifact,
        num_blocks=num_blocks,
        skip_tokenizer_init=not config.needs_tokenizer,
    )


def load_bench_engine(config: BenchConfig, artifact: Path, max_prompt_len: int) -> LLMEngine:
    """Load the model (or make dummy weights) and build the engine."""
    return LLMEngine.from_args(bench_engine_args(config, artifact, max_prompt_len))
