"""What an engine is built from: `EngineArgs` (the user's options, with the reference
server's defaults) and `load_engine_parts`, which turns them into a loaded model, its
tokenizer and stop ids, a sized KV pool and the scheduler's limits.

Why a module of its own: the order matters and is easy to get wrong. The weights must be
on the device before free memory can be measured, the pool must be sized before the
serving length can be checked or fitted against it, and the step's token budget cannot
exceed the prefill chunk the KV cache was made with. Every front end (LLM, server,
benchmarks) builds engines through here.

Two options serve benchmarks (vLLM's names): `load_format="dummy"` makes random weights of
the artifact's shapes on the device instead of reading the checkpoint, and
`skip_tokenizer_init` builds the engine without a tokenizer (token-id prompts only, no
text). Together they need nothing from the model directory but config.json.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.generation_config import stop_token_ids_from_checkpoint
from vllm_tvm.runtime.engine.scheduler import SchedulerConfig, SchedulingPolicy
from vllm_tvm.runtime.kv.cache_config import (
    DEFAULT_BLOCK_SIZE,
    CacheConfig,
    check_block_size,
    fit_max_model_len,
    measure_device_memory,
    resolve_num_blocks,
)
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.sampling.params import LogprobsMode, check_logprobs_mode
from vllm_tvm.runtime.tokenization import Tokenizer, load_tokenizer
from vllm_tvm.runtime.weights.dummy_weights import make_dummy_params
from vllm_tvm.runtime.weights.load_format import AUTO, DUMMY, check_load_format


def merged_eos_ids(primary: list[int], checkpoint_ids: list[int]) -> list[int]:
    """Primary EOS first (the tokenizer's), then the checkpoint's extra stop ids."""
    merged = list(primary[:1])
    for token in [*primary[1:], *checkpoint_ids]:
        if token not in merged:
            merged.append(token)
    return merged


@dataclass(frozen=True)
class EngineArgs:
    """Everything that shapes an engine, with the reference server's defaults.

    The KV pool is `num_blocks` x `block_size` tokens, or sized from `kv_cache_memory`
    bytes, or from `gpu_memory_utilization` (the fraction of the device this process may
    use, measured after the weights are loaded); at most one of the three. `max_model_len`
    None fits the model's length to the pool. `load_format` is one of load_format.LOAD_FORMATS
    (`dummy` weights are seeded by `seed`, 0 when None); `skip_tokenizer_init` loads no
    tokenizer.
    """

    model: str | Path
    artifact: str | Path
    device: str = "cpu"
    max_model_len: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None
    kv_cache_memory: int | None = None
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool = True
    scheduling_policy: SchedulingPolicy = "fcfs"
    logprobs_mode: LogprobsMode = "raw_logprobs"
    seed: int | None = None
    show_progress: bool = True
    load_format: str = AUTO
    skip_tokenizer_init: bool = False


@dataclass
class EngineParts:
    """A loaded model and the settled configuration of an engine over it."""

    runner: ModelRunner
    tokenizer: Tokenizer | None
    eos_token_ids: list[int]
    cache_config: CacheConfig
    scheduler_config: SchedulerConfig
    max_model_len: int


def load_engine_parts(args: EngineArgs) -> EngineParts:
    """Validate `args`, load tokenizer and model, size the KV pool and fit the length."""
    scheduler_config = SchedulerConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        policy=args.scheduling_policy,
    )
    check_block_size(args.block_size)
    check_logprobs_mode(args.logprobs_mode)
    check_load_format(args.load_format)
    model_path = Path(args.model)
    tokenizer = None if args.skip_tokenizer_init else load_tokenizer(model_path)
    params = (
        make_dummy_params(
            read_manifest(Path(args.artifact)).params,
            args.device,
            seed=args.seed or 0,
            show_progress=args.show_progress,
        )
        if args.load_format == DUMMY
        else None
    )
    checkpoint_ids = stop_token_ids_from_checkpoint(model_path) if model_path.is_dir() else []
    runner = ModelRunner(
        args.artifact,
        model_path,
        device=args.device,
        max_model_len=args.max_model_len,
        max_batch_size=args.max_num_seqs,
        prefill_chunk_size=args.max_num_batched_tokens,
        show_progress=args.show_progress,
        max_total_seq_len=args.block_size,  # a placeholder until the pool is sized
        params=params,
    )
    num_blocks = resolve_num_blocks(
        block_size=args.block_size,
        kv_bytes_per_token=runner.kv_bytes_per_token,
        num_blocks=args.num_blocks,
        kv_cache_memory=args.kv_cache_memory,
        gpu_memory_utilization=args.gpu_memory_utilization,
        measure=lambda: measure_device_memory(runner.device),
    )
    cache_config = CacheConfig(args.block_size, num_blocks, args.enable_prefix_caching)
    max_model_len = fit_max_model_len(args.max_model_len, runner.max_model_len, cache_config)
    runner.resize_kv_cache(cache_config.num_tokens)
    budget = min(args.max_num_batched_tokens, runner.kv_config.prefill_chunk_size)
    return EngineParts(
        runner=runner,
        tokenizer=tokenizer,
        eos_token_ids=merged_eos_ids(
            tokenizer.eos_token_ids if tokenizer is not None else [], checkpoint_ids
        ),
        cache_config=cache_config,
        scheduler_config=replace(scheduler_config, max_num_batched_tokens=budget),
        max_model_len=max_model_len,
    )
