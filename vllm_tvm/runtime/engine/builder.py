"""`load_engine_parts`: from `EngineArgs` to a loaded model, its tokenizer and stop ids, a
sized KV pool and the scheduler's limits.

Why a module of its own: the order matters and is easy to get wrong. The weights must be
on the device before free memory can be measured, the pool must be sized before the
serving length can be checked or fitted against it, and the step's token budget cannot
exceed the prefill chunk the KV cache was made with. Every front end (LLM, server,
benchmarks) builds engines through here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.manifest import Manifest, read_manifest
from vllm_tvm.artifacts.runtime_spec import RuntimeSpec
from vllm_tvm.artifacts.speculative_roles import HEAD_ARCHITECTURES
from vllm_tvm.checkpoints.generation_config import stop_token_ids_from_checkpoint
from vllm_tvm.runtime.engine.args import DEFAULT_NUM_BLOCKS, EngineArgs
from vllm_tvm.runtime.engine.image_intake import ImageIntake
from vllm_tvm.runtime.engine.patch_merge_intake import PatchMergeImageIntake
from vllm_tvm.runtime.engine.scheduler import SchedulerConfig
from vllm_tvm.runtime.kv.cache_config import (
    CacheConfig,
    check_block_size,
    fit_max_model_len,
    measure_device_memory,
    resolve_pool_sizes,
)
from vllm_tvm.runtime.kv.recurrent_slots import state_bytes_per_slot
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.speculative.draft_runner import load_draft_runner
from vllm_tvm.runtime.speculative.head_runner import load_head_runner
from vllm_tvm.runtime.tokenization import Tokenizer, load_tokenizer
from vllm_tvm.runtime.weights.load_format import DUMMY


def merged_eos_ids(primary: list[int], checkpoint_ids: list[int]) -> list[int]:
    """Primary EOS first (the tokenizer's), then the checkpoint's extra stop ids."""
    merged = list(primary[:1])
    for token in [*primary[1:], *checkpoint_ids]:
        if token not in merged:
            merged.append(token)
    return merged


@dataclass
class EngineParts:
    """A loaded model and the settled configuration of an engine over it."""

    runner: Runner
    tokenizer: Tokenizer | None
    eos_token_ids: list[int]
    cache_config: CacheConfig
    scheduler_config: SchedulerConfig
    max_model_len: int
    draft_runner: ModelRunner | None = None
    image_intake: ImageIntake | None = None
    """The images' preprocessing of a model with a vision tower; None: text only."""


def _cap_batch(args: EngineArgs, spec: RuntimeSpec) -> EngineArgs:
    """`args` with `max_num_seqs` at most the model's cap (said on stderr when lowered)."""
    cap = spec.max_num_seqs
    if cap is None or args.max_num_seqs <= cap:
        return args
    print(
        f"vllm-tvm: max_num_seqs {args.max_num_seqs} lowered to {cap} for this model "
        f"({spec.max_num_seqs_reason})",
        file=sys.stderr,
    )
    return replace(args, max_num_seqs=cap)


def _cap_to_slots(config: SchedulerConfig, cache: CacheConfig) -> SchedulerConfig:
    """`config` running at most one sequence per recurrent-state slot (said on stderr when
    the memory budget held fewer slots than `max_num_seqs`)."""
    slots = cache.recurrent_slots
    if not slots or config.max_num_seqs <= slots:
        return config
    print(
        f"vllm-tvm: max_num_seqs {config.max_num_seqs} lowered to {slots}, the recurrent-state "
        f"slots of {cache.recurrent_bytes_per_slot} bytes the KV memory budget holds",
        file=sys.stderr,
    )
    return replace(config, max_num_seqs=slots)


def _load_runner(
    args: EngineArgs, manifest: Manifest, model_path: Path, params: list[Any] | None
) -> Runner:
    """The artifact's runner: on one device, or on `tensor_parallel_size` ranks."""
    sizes = {
        "max_model_len": args.max_model_len,
        "max_batch_size": args.max_num_seqs,
        "prefill_chunk_size": args.token_budget,
        "show_progress": args.show_progress,
        "max_total_seq_len": args.block_size,  # a placeholder until the pool is sized
        "manifest": manifest,
    }
    artifact = Path(str(args.artifact))
    if args.tensor_parallel_size == 1:
        return ModelRunner(artifact, model_path, args.device, params=params, **sizes)
    if params is not None:
        raise ValueError("tensor parallelism loads the checkpoint's weights: no dummy weights")
    shards = (manifest.tensor_parallel or {}).get("shards", 1)
    if shards != args.tensor_parallel_size:
        raise ValueError(
            f"artifact {args.artifact} is split over {shards} rank(s); "
            f"tensor_parallel_size is {args.tensor_parallel_size}"
        )
    from vllm_tvm.runtime.model.tensor_parallel_runner import TensorParallelRunner

    return TensorParallelRunner(artifact, model_path, args.device, **sizes)


def load_engine_parts(args: EngineArgs) -> EngineParts:
    """Validate `args`, load tokenizer and model, size the KV pool and fit the length."""
    if args.artifact is None:
        raise ValueError(f"no artifact for {args.model}: an engine runs a built artifact")
    manifest = read_manifest(Path(args.artifact))
    args = _cap_batch(args, manifest.runtime)
    scheduler_config = SchedulerConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.token_budget,
        policy=args.scheduling_policy,
        step_time_target=args.step_time_target,
    )
    check_block_size(args.block_size)
    model_path = Path(args.model)
    tokenizer = None if args.skip_tokenizer_init else load_tokenizer(model_path)
    params = _dummy_params(args, manifest)
    checkpoint_ids = stop_token_ids_from_checkpoint(model_path) if model_path.is_dir() else []
    runner = _load_runner(args, manifest, model_path, params)
    spec = args.speculative_config
    # Speculation keeps a snapshot of each slot's state beside it (kv/recurrent_pool.py).
    snapshots = spec is not None and bool(runner.spec.recurrent_state)
    slot_bytes = state_bytes_per_slot(runner.spec.recurrent_state) * (2 if snapshots else 1)
    sizes = resolve_pool_sizes(
        block_size=args.block_size,
        kv_bytes_per_token=runner.kv_bytes_per_token,
        num_blocks=args.num_blocks,
        kv_cache_memory=args.kv_cache_memory,
        gpu_memory_utilization=args.gpu_memory_utilization,
        measure=lambda: measure_device_memory(runner.device),
        default=DEFAULT_NUM_BLOCKS,
        recurrent_bytes_per_slot=slot_bytes,
        max_num_seqs=args.max_num_seqs,
    )
    prefix_caching = args.enable_prefix_caching and runner.spec.prefix_caching
    cache_config = CacheConfig(
        args.block_size, sizes.num_blocks, prefix_caching, sizes.recurrent_slots, slot_bytes
    )
    max_model_len = fit_max_model_len(args.max_model_len, runner.max_model_len, cache_config)
    runner.resize_kv_cache(cache_config.num_tokens)
    runner.resize_recurrent_pool(cache_config.recurrent_slots, snapshots)
    scheduler_config = _cap_to_slots(scheduler_config, cache_config)
    budget = min(args.token_budget, runner.kv_config.prefill_chunk_size)
    draft_runner = None
    if spec is not None and spec.method == "draft_model":
        draft_runner = load_draft_runner(
            spec,
            runner,
            model_path,
            args.device,
            args.max_num_seqs,
            cache_config.num_tokens,
            args.show_progress,
            lambda draft_manifest: _dummy_params(args, draft_manifest),
        )
    if spec is not None and spec.method in HEAD_ARCHITECTURES:
        draft_runner = load_head_runner(
            spec,
            runner,
            args.device,
            args.max_num_seqs,
            cache_config.num_tokens,
            args.show_progress,
        )
    return EngineParts(
        runner=runner,
        tokenizer=tokenizer,
        eos_token_ids=merged_eos_ids(
            tokenizer.eos_token_ids if tokenizer is not None else [], checkpoint_ids
        ),
        cache_config=cache_config,
        scheduler_config=replace(scheduler_config, max_num_batched_tokens=budget),
        max_model_len=max_model_len,
        draft_runner=draft_runner,
        image_intake=_image_intake(runner.spec, model_path, tokenizer, budget),
    )


def _image_intake(
    spec: RuntimeSpec, model_path: Path, tokenizer: Tokenizer | None, budget: int
) -> ImageIntake | None:
    """The image intake of an artifact that carries a vision tower (none otherwise)."""
    if spec.vision is None:
        return None
    intake = ImageIntake if spec.vision.patch_merge is None else PatchMergeImageIntake
    return intake.from_checkpoint(model_path, spec.vision, tokenizer, budget)


def _dummy_params(args: EngineArgs, manifest: Manifest) -> list[Any] | None:
    """Random weights of the artifact's shapes on the device for `load_format="dummy"`;
    None (weights read from the checkpoint) otherwise."""
    if args.load_format != DUMMY:
        return None
    # Imported here: it needs ml_dtypes, which a start loading real weights may skip.
    from vllm_tvm.runtime.weights.dummy_weights import make_dummy_params

    return make_dummy_params(
        manifest.params,
        args.device,
        seed=args.seed or 0,
        show_progress=args.show_progress,
    )
