"""How big the KV pool is and how long a sequence may be: settled once, at engine startup.

Why it exists: the pool can be given three ways (a block count, a byte budget, or a fraction
of the device's memory measured after the weights are loaded), and the serving length must
then agree with it. vLLM's rules apply: an explicit `max_model_len` that one sequence cannot
fit in the pool is an error naming the sizes and the flags that close the gap; an implicit
one is auto-fitted down to the pool (and logged). Every number here is validated once, so
the block manager and scheduler can trust it.

A hybrid model (recurrent layers beside attention) also keeps one recurrent-state slot per
running sequence (recurrent_slots.py). Its pool comes out of the same byte budget, first:
`max_num_seqs` slots when the budget holds them and one KV block, fewer when not (the
engine then runs that many sequences at most), and the KV blocks get what is left. A pool
given in blocks (`num_blocks`, or the default) gets `max_num_seqs` slots beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_tvm.runtime.kv.kv_cache import COMPILED_PAGE_SIZE

_MEMINFO = Path("/proc/meminfo")
_DLPACK_CPU = 1

logger = logging.getLogger(__name__)


class KVCacheSizeError(ValueError):
    """The KV pool cannot be made, or cannot hold one sequence of the serving length."""


def check_block_size(block_size: int) -> None:
    """Refuse a block size that is not a whole number of the kernels' KV pages."""
    if block_size <= 0 or block_size % COMPILED_PAGE_SIZE:
        raise ValueError(
            f"block_size must be a positive multiple of the compiled KV page size "
            f"{COMPILED_PAGE_SIZE}, got {block_size}"
        )


@dataclass(frozen=True)
class CacheConfig:
    """The KV pool: `num_blocks` blocks of `block_size` tokens, and the prefix-cache switch;
    for a hybrid model its recurrent-state pool of `recurrent_slots` slots of
    `recurrent_bytes_per_slot` bytes (0: the model keeps no recurrent state)."""

    block_size: int
    num_blocks: int
    enable_prefix_caching: bool
    recurrent_slots: int = 0
    recurrent_bytes_per_slot: int = 0

    def __post_init__(self) -> None:
        check_block_size(self.block_size)
        if self.num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {self.num_blocks}")
        if self.recurrent_slots < 0 or self.recurrent_bytes_per_slot < 0:
            raise ValueError(
                f"recurrent_slots {self.recurrent_slots} and recurrent_bytes_per_slot "
                f"{self.recurrent_bytes_per_slot} must not be negative"
            )

    @property
    def num_tokens(self) -> int:
        """Token slots in the pool."""
        return self.block_size * self.num_blocks


@dataclass(frozen=True)
class DeviceMemory:
    """Total and currently free bytes of the device that holds the KV cache."""

    total: int
    free: int


def measure_device_memory(device: Any) -> DeviceMemory:
    """Free and total memory of a TVM device (a CPU's is the host RAM, from /proc/meminfo)."""
    if device.dlpack_device_type() == _DLPACK_CPU:
        fields = {}
        for line in _MEMINFO.read_text().splitlines():
            name, _, rest = line.partition(":")
            fields[name] = int(rest.split()[0]) * 1024
        return DeviceMemory(total=fields["MemTotal"], free=fields["MemAvailable"])
    total = device.total_global_memory  # type: ignore[attr-defined]
    free = device.available_global_memory  # type: ignore[attr-defined]
    if total is None or free is None:
        raise KVCacheSizeError(
            f"device {device} does not report its memory; pass --num-blocks or --kv-cache-memory"
        )
    return DeviceMemory(total=int(total), free=int(free))


def kv_memory_from_utilization(memory: DeviceMemory, utilization: float) -> int:
    """Bytes left for the KV cache when this process may use `utilization` of the device.

    What is in use now (weights, other processes) counts against the share, as in vLLM:
    `total * utilization - (total - free)`.
    """
    if not 0.0 < utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    budget = int(memory.total * utilization) - (memory.total - memory.free)
    if budget <= 0:
        used = memory.total - memory.free
        raise KVCacheSizeError(
            f"gpu_memory_utilization {utilization} allows {int(memory.total * utilization)} "
            f"bytes of the device's {memory.total}, but {used} are already in use: no room "
            "for a KV cache. Raise --gpu-memory-utilization, or size the pool with "
            "--num-blocks / --kv-cache-memory"
        )
    return budget


@dataclass(frozen=True)
class PoolSizes:
    """The KV blocks and recurrent-state slots settled at startup."""

    num_blocks: int
    recurrent_slots: int = 0


def resolve_pool_sizes(
    *,
    block_size: int,
    kv_bytes_per_token: int,
    num_blocks: int | None = None,
    kv_cache_memory: int | None = None,
    gpu_memory_utilization: float | None = None,
    measure: Callable[[], DeviceMemory] | None = None,
    default: int,
    recurrent_bytes_per_slot: int = 0,
    max_num_seqs: int = 0,
) -> PoolSizes:
    """The pool's block count from at most one of the three ways to size it, and its
    recurrent-state slots (none when `recurrent_bytes_per_slot` is 0; see the module doc).

    `num_blocks` is taken as given; `kv_cache_memory` (bytes) and `gpu_memory_utilization`
    (a fraction of the device, measured by calling `measure()` -> DeviceMemory) are divided
    by the bytes of one block, after the recurrent-state slots. None of them: `default`.
    """
    given = {
        name: value
        for name, value in (
            ("num_blocks", num_blocks),
            ("kv_cache_memory", kv_cache_memory),
            ("gpu_memory_utilization", gpu_memory_utilization),
        )
        if value is not None
    }
    if len(given) > 1:
        raise ValueError(
            f"give at most one of num_blocks, kv_cache_memory, gpu_memory_utilization; got {given}"
        )
    wanted_slots = max_num_seqs if recurrent_bytes_per_slot else 0
    if num_blocks is not None:
        return PoolSizes(num_blocks, wanted_slots)
    if kv_cache_memory is None and gpu_memory_utilization is None:
        return PoolSizes(default, wanted_slots)
    block_bytes = block_size * kv_bytes_per_token
    if kv_cache_memory is None:
        assert measure is not None and gpu_memory_utilization is not None
        kv_cache_memory = kv_memory_from_utilization(measure(), gpu_memory_utilization)
    slots = _fit_recurrent_slots(
        kv_cache_memory, block_bytes, recurrent_bytes_per_slot, wanted_slots
    )
    state_bytes = slots * recurrent_bytes_per_slot
    blocks = (kv_cache_memory - state_bytes) // block_bytes
    if blocks <= 0:
        raise KVCacheSizeError(
            f"a KV cache of {kv_cache_memory} bytes holds no block: one block of {block_size} "
            f"tokens takes {block_bytes} bytes. Raise --kv-cache-memory (or "
            "--gpu-memory-utilization), or pass --num-blocks"
        )
    return PoolSizes(int(blocks), slots)


def _fit_recurrent_slots(budget: int, block_bytes: int, slot_bytes: int, wanted: int) -> int:
    """Up to `wanted` slots of `slot_bytes` that leave `budget` room for one KV block."""
    if not wanted:
        return 0
    slots = min(wanted, (budget - block_bytes) // slot_bytes)
    if slots < 1:
        raise KVCacheSizeError(
            f"a KV cache of {budget} bytes cannot hold one sequence's recurrent state "
            f"({slot_bytes} bytes) beside one KV block ({block_bytes} bytes). Raise "
            "--kv-cache-memory (or --gpu-memory-utilization), or pass --num-blocks"
        )
    return int(slots)


def fit_max_model_len(requested: int | None, model_limit: int, cache: CacheConfig) -> int:
    """The serving length: `requested` if the pool holds one sequence that long (else an
    error naming the sizes and the flags that fix it); unset, the model's limit cut down to
    the pool (logged when cut)."""
    pool = cache.num_tokens
    if requested is not None:
        if requested > pool:
            needed = -(-requested // cache.block_size)
            raise KVCacheSizeError(
                f"max_model_len {requested} needs {needed} KV blocks of {cache.block_size} "
                f"tokens, but the pool has {cache.num_blocks} blocks ({pool} tokens). Raise "
                "--num-blocks (or --kv-cache-memory / --gpu-memory-utilization), or lower "
                "--max-model-len"
            )
        return requested
    if model_limit > pool:
        logger.warning(
            "max_model_len auto-fitted from the model's %d to %d tokens, what the KV pool "
            "(%d blocks of %d) holds; raise --num-blocks for a longer context",
            model_limit,
            pool,
            cache.num_blocks,
            cache.block_size,
        )
        return pool
    return model_limit
