"""The paged KV cache object of a loaded model, driven through TVM's KV-state builtins.

The cache is created by the artifact's `create_kv_cache` function (so its attention kernels
match the model) and manipulated with `vm.builtin.kv_state_*` / `attention_kv_cache_*`.
This class names those calls; the block accounting above it lives in block_manager.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tvm

COMPILED_PAGE_SIZE = 16
"""Tokens per KV page. TVM's paged-attention kernels are generated for this page size (the
`page_size=16` default of `relax.frontend.nn.llm`), so a cache must be created with it; the
engine's blocks are whole multiples of it."""


@dataclass(frozen=True)
class KVCacheConfig:
    """Sizes of the paged KV cache (all in tokens except `max_batch_size`)."""

    max_batch_size: int
    max_total_seq_len: int
    prefill_chunk_size: int
    page_size: int = COMPILED_PAGE_SIZE

    def check_holds(self, max_num_seqs: int, max_num_batched_tokens: int, pool_tokens: int) -> None:
        """Refuse a scheduler or pool this cache cannot serve: more sequences per forward
        than its batch size, a step's tokens past its prefill chunk, a pool past its size."""
        if self.prefill_chunk_size < max_num_batched_tokens:
            raise ValueError(
                f"max_num_batched_tokens {max_num_batched_tokens} exceeds the KV cache's "
                f"prefill chunk of {self.prefill_chunk_size} tokens"
            )
        if self.max_batch_size < max_num_seqs:
            raise ValueError(
                f"max_num_seqs {max_num_seqs} exceeds the KV cache's batch "
                f"size {self.max_batch_size}"
            )
        if self.max_total_seq_len < pool_tokens:
            raise ValueError(
                f"the KV pool of {pool_tokens} tokens does not fit the KV cache's "
                f"{self.max_total_seq_len}"
            )


def _builtin(name: str) -> Any:
    return tvm.get_global_func(f"vm.builtin.{name}")


class PagedKVCache:
    """One paged KV cache: sequences are added, extended by forwards, forked and removed."""

    def __init__(
        self, create_fn: Any, config: KVCacheConfig, builtin: Callable[[str], Any] | None = None
    ) -> None:
        """`builtin(name)`: the callable of `vm.builtin.<name>` (default: this process's; a
        tensor-parallel runner passes its session's, which act on every rank's cache)."""
        shape = tvm.runtime.ShapeTuple
        builtin = builtin or _builtin
        self.config = config
        self.handle = create_fn(
            shape([config.max_batch_size]),
            shape([config.max_total_seq_len]),
            shape([config.prefill_chunk_size]),
            shape([config.page_size]),
            shape([0]),
        )
        self._add = builtin("kv_state_add_sequence")
        self._remove = builtin("kv_state_remove_sequence")
        self._fork = builtin("kv_state_fork_sequence")
        self._popn = builtin("kv_state_popn")
        self._begin = builtin("kv_state_begin_forward")
        self._end = builtin("kv_state_end_forward")
        self._clear = builtin("kv_state_clear")
        self._available_pages = builtin("attention_kv_cache_get_num_available_pages")
        self._seq_len = builtin("attention_kv_cache_get_sequence_length")

    def add_sequence(self, seq_id: int) -> None:
        self._add(self.handle, seq_id)

    def remove_sequence(self, seq_id: int) -> None:
        self._remove(self.handle, seq_id)

    def fork_sequence(self, parent_id: int, child_id: int, fork_pos: int = -1) -> None:
        """Child shares the parent's first `fork_pos` tokens (-1: all of them)."""
        self._fork(self.handle, parent_id, child_id, fork_pos)

    def popn(self, seq_id: int, count: int) -> None:
        """Drop the last `count` tokens of a sequence."""
        self._popn(self.handle, seq_id, count)

    def begin_forward(self, seq_ids: Sequence[int], lengths: Sequence[int]) -> None:
        shape = tvm.runtime.ShapeTuple
        self._begin(self.handle, shape(list(seq_ids)), shape(list(lengths)))

    def end_forward(self) -> None:
        self._end(self.handle)

    def clear(self) -> None:
        """Remove every sequence."""
        self._clear(self.handle)

    def available_pages(self) -> int:
        return int(self._available_pages(self.handle))

    def sequence_length(self, seq_id: int) -> int:
        return int(self._seq_len(self.handle, seq_id))
