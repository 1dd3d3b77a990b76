"""Tensor-parallel sharding plan of the Llama family (Megatron-style), without TVM.

Why a plan separate from the model: the compiler builds one rank's network from it (per-rank
head counts and widths, an all-reduce after each row-parallel projection), the manifest
records it (which slice of which checkpoint tensor every rank reads), and the loader slices
by it, so the three cannot disagree. One artifact serves every rank: the network is the same
on all of them and only the weights differ.

The plan, for `shards` ranks:
- fused qkv is column-parallel: rank r holds q heads [r*q/s, (r+1)*q/s) and, when the KV
  heads divide among the ranks, KV heads [r*kv/s, (r+1)*kv/s); when there are fewer KV heads
  than ranks (s a multiple of kv), each rank holds ONE KV head, replicated on s/kv ranks:
  head r // (s/kv), the one its q heads attend to;
- o_proj and down_proj are row-parallel (input columns split), each followed by an
  all-reduce (sum) of the ranks' partial outputs;
- gate_up is column-parallel with gate and up split separately (each rank's slice is
  [gate_r | up_r]);
- embeddings, norms and lm_head are replicated (vocab-parallel is not done).
Row-parallel biases, q/k norms over whole projections (OLMo-2) and checkpoints storing the
fused matrices (Phi-3) do not split this way and are refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vllm_tvm.checkpoints.family_index import all_families, family_of
from vllm_tvm.checkpoints.shard_slices import SourceShard

ROW_SOURCES = (".o_proj.weight", ".down_proj.weight")
PREFUSED_SOURCES = (".qkv_proj.", ".gate_up_proj.")


def tensor_parallel_architectures() -> list[str]:
    """The HF architectures of the families the plan can split (their `tensor_parallel`)."""
    return [name for spec in all_families() if spec.tensor_parallel for name in spec.architectures]


class TensorParallelError(ValueError):
    """A model or checkpoint the tensor-parallel plan cannot split."""


@dataclass(frozen=True)
class RankWidths:
    """What one rank's network holds of each sharded dimension."""

    q_heads: int
    kv_heads: int
    intermediate_size: int


def shards_of(config: Any) -> int:
    """The config's rank count (configs of families without the option: 1)."""
    return int(getattr(config, "tensor_parallel_shards", 1))


def check_shardable(config: Any, shards: int) -> None:
    """Refuse, by name, a model the plan cannot split over `shards` ranks."""
    if shards < 1:
        raise TensorParallelError(f"tensor_parallel_shards must be >= 1, got {shards}")
    if shards == 1:
        return
    family = family_of(config.architecture)
    if family is None or not family.tensor_parallel:
        raise TensorParallelError(
            f"tensor parallelism is not supported for {config.architecture}; supported: "
            + ", ".join(tensor_parallel_architectures())
        )
    q_heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    refusals = {
        f"{q_heads} attention heads do not divide among {shards} ranks": q_heads % shards,
        f"{kv_heads} KV heads neither divide among nor replicate over {shards} ranks": (
            kv_heads % shards and shards % kv_heads
        ),
        f"intermediate_size {config.intermediate_size} does not divide among {shards} ranks": (
            config.intermediate_size % shards
        ),
        "row-parallel o_proj / MLP biases are not supported": (
            config.o_proj_bias or config.mlp_bias
        ),
        "q/k norms over the whole projection are not supported": (
            config.qk_norm and config.qk_norm_scope == "projection"
        ),
    }
    for reason, refused in refusals.items():
        if refused:
            raise TensorParallelError(f"tensor parallelism over {shards} ranks: {reason}")


def with_shards(config: Any, shards: int) -> Any:
    """`config` split over `shards` ranks (itself when 1), refused by name if it cannot be."""
    check_shardable(config, shards)
    return config if shards == 1 else replace(config, tensor_parallel_shards=shards)


def rank_widths(config: Any, intermediate_size: int | None = None) -> RankWidths:
    """One rank's head counts and MLP width (`intermediate_size` overrides the config's)."""
    shards = shards_of(config)
    return RankWidths(
        q_heads=config.num_attention_heads // shards,
        kv_heads=max(1, config.num_key_value_heads // shards),
        intermediate_size=(intermediate_size or config.intermediate_size) // shards,
    )


def _kv_head_ranges(kv_heads: int, shards: int) -> list[tuple[int, int]]:
    """[first, last) KV head of each rank (one replicated head when kv_heads < shards)."""
    if kv_heads >= shards:
        per_rank = kv_heads // shards
        return [(r * per_rank, (r + 1) * per_rank) for r in range(shards)]
    replicas = shards // kv_heads
    return [(r // replicas, r // replicas + 1) for r in range(shards)]


def _even_ranges(size: int, shards: int) -> list[tuple[int, int]]:
    step = size // shards
    return [(r * step, (r + 1) * step) for r in range(shards)]


def source_shard(source: str, config: Any) -> SourceShard:
    """How the ranks split checkpoint tensor `source` (HF name)."""
    shards = shards_of(config)
    if any(marker in source for marker in PREFUSED_SOURCES):
        raise TensorParallelError(
            f"tensor parallelism: checkpoint tensor {source} stores fused projections; "
            "only checkpoints with separate q/k/v and gate/up projections are sliced"
        )
    head_dim = config.head_dim
    if ".q_proj." in source or ".o_proj.weight" in source:
        heads = _even_ranges(config.num_attention_heads, shards)
        ranges = [(first * head_dim, last * head_dim) for first, last in heads]
    elif ".k_proj." in source or ".v_proj." in source:
        heads = _kv_head_ranges(config.num_key_value_heads, shards)
        ranges = [(first * head_dim, last * head_dim) for first, last in heads]
    elif any(marker in source for marker in (".gate_proj.", ".up_proj.", ".down_proj.weight")):
        ranges = _even_ranges(config.intermediate_size, shards)
    else:
        return SourceShard(source, None, ())
    axis = 1 if any(marker in source for marker in ROW_SOURCES) else 0
    return SourceShard(source, axis, tuple(ranges))


def parameter_plan(sources: list[str], config: Any) -> list[SourceShard]:
    """The slices each rank reads of a parameter made of `sources` (concatenated, per rank,
    in this order along the parameter's concat axis)."""
    return [source_shard(source, config) for source in sources]


def manifest_plan(params: dict[str, list[str]], config: Any) -> dict[str, Any]:
    """The plan as the artifact's manifest records it: the rank count and, per parameter,
    each source's shard axis and per-rank [start, stop) segments."""
    return {
        "shards": shards_of(config),
        "params": {
            name: [shard.to_dict() for shard in parameter_plan(sources, config)]
            for name, sources in params.items()
        },
    }
