"""From a `BenchConfig` to a loaded engine: the artifact, the KV pool size, the engine.

Why it exists: a benchmark engine differs from a serving one in two ways that are easy to
get wrong. Its KV pool is sized from the workload (every request in flight at the largest
concurrency holds its whole sequence, so no level is slowed by preemption unless the user
asks for a smaller pool), and it loads no tokenizer unless the workload needs one, so a
config.json-only directory with dummy weights is enough.
"""

from __future__ import annotations

import math
from pathlib import Path

from vllm_tvm.benchmarking.config import BenchConfig
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.runtime.kv.cache_config import DEFAULT_BLOCK_SIZE


def resolve_bench_artifact(config: BenchConfig) -> Path:
    """The given artifact, or the cached one for (model, device, dtype, weight format),
    compiled on first use."""
    if config.artifact is not None:
        return Path(config.artifact)
    from vllm_tvm.entrypoints.llm import resolve_artifact

    return resolve_artifact(
        config.model, config.device, config.dtype, config.show_progress, config.weight_format
    )


def default_num_blocks(config: BenchConfig, max_prompt_len: int) -> int:
    """KV blocks for the largest concurrency's requests at full length (prompt + output),
    and at least one sequence of `max_model_len` when it is given."""
    per_sequence = math.ceil((max_prompt_len + config.output_len) / DEFAULT_BLOCK_SIZE)
    blocks = per_sequence * max(config.concurrency)
    if config.max_model_len is not None:
        blocks = max(blocks, math.ceil(config.max_model_len / DEFAULT_BLOCK_SIZE))
    return blocks


def engine_args(config: BenchConfig, artifact: Path, num_blocks: int) -> EngineArgs:
    """The engine options of a benchmark run (prefix caching on, as in vLLM)."""
    return EngineArgs(
        model=config.model,
        artifact=artifact,
        device=config.device,
        max_model_len=config.max_model_len,
        max_num_seqs=config.max_num_seqs or max(config.concurrency),
        max_num_batched_tokens=config.max_num_batched_tokens,
        block_size=DEFAULT_BLOCK_SIZE,
        num_blocks=num_blocks,
        seed=config.seed,
        show_progress=config.show_progress,
        load_format=config.load_format,
        skip_tokenizer_init=not config.needs_tokenizer,
    )


def load_bench_engine(config: BenchConfig, artifact: Path, num_blocks: int) -> LLMEngine:
    """Load the model (or make dummy weights) and build the engine."""
    return LLMEngine.from_args(engine_args(config, artifact, num_blocks))
