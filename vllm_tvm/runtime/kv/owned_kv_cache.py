"""The KV cache of an artifact that runs over pages the runtime owns (`prefill_owned` /
`decode_owned`, model_defs/owned_kv.py), in place of TVM's `PagedKVCache`.

Why: a decode step over TVM's cache is planned on the host every step into buffers whose
offsets move, so it cannot be replayed as one CUDA graph. Here every layer's pages are one
device tensor allocated once; owned_pages.py hands pages to sequences; and a decode step's
metadata goes, padded to its batch-size bucket, into that bucket's fixed device buffer
(decode_step_buffers.py) with one queued copy, so the graph captured for the bucket on its
first step replays on every later one. A prefill's metadata is plain per-call tensors: the
prefill is not captured.

The sequence operations are `PagedKVCache`'s (block_manager.py drives either).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from vllm_tvm.artifacts.owned_kv import (
    OWNED_DECODE_MAX_BATCH,
    OWNED_PREFILL,
    OWNED_PREFILL_FRESH,
    OWNED_PREFILL_MIXED,
)
from vllm_tvm.artifacts.runtime_spec import OwnedPagesSpec
from vllm_tvm.runtime.kv.decode_step_buffers import DecodeStepBuffers
from vllm_tvm.runtime.kv.flashinfer_ragged import FlashInferRaggedAttention
from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig
from vllm_tvm.runtime.kv.owned_pages import OwnedPageTable

DECODE_BUCKETS = (1, 2, 4, *range(8, OWNED_DECODE_MAX_BATCH + 1, 8))
"""The batch sizes a decode step is padded to (vLLM's CUDA-graph capture sizes): one
captured graph and one metadata buffer each."""


def decode_bucket(batch: int) -> int:
    """The smallest bucket holding `batch` rows."""
    if not 1 <= batch <= DECODE_BUCKETS[-1]:
        raise ValueError(
            f"a decode step of {batch} sequences; owned KV pages serve 1 to {DECODE_BUCKETS[-1]}"
        )
    return DECODE_BUCKETS[bisect.bisect_left(DECODE_BUCKETS, batch)]


def page_csr(
    tables: Sequence[Sequence[int]], lengths: Sequence[int], page_size: int
) -> list[np.ndarray]:
    """The pages holding each sequence's first `lengths` tokens as CSR (indptr, values) and
    the last page's fill; a sequence of no tokens has no pages and a fill of `page_size`
    (the kernels read (pages - 1) * page_size + fill tokens). Values of no pages at all are
    one unread 0: a device tensor of no elements is never passed."""
    counts = -(-np.asarray(lengths, np.int64) // page_size)
    values = [page for table, count in zip(tables, counts, strict=True) for page in table[:count]]
    return [
        np.concatenate([[0], np.cumsum(counts)]),
        np.asarray(values or [0], np.int64),
        np.asarray(lengths, np.int64) - (counts - 1) * page_size,
    ]


def prefill_metadata(
    tables: Sequence[Sequence[int]],
    cached: Sequence[int],
    new: Sequence[int],
    page_size: int,
) -> list[np.ndarray]:
    """PREFILL_METADATA (model_defs/owned_kv.py) for sequences holding `cached` tokens that
    get `new` more, their pages `tables` (covering both): q_indptr, then the cached tokens'
    page_indptr, page_values, last_page_len, then each new token's position and append
    slot."""
    positions = np.concatenate(
        [np.arange(c, c + n) for c, n in zip(cached, new, strict=True)]
    ).astype(np.int64)
    owners = np.repeat(np.arange(len(new)), new)
    slot_pages = np.asarray(
        [tables[o][p // page_size] for o, p in zip(owners, positions, strict=True)]
    )
    arrays = [
        np.concatenate([[0], np.cumsum(new)]),
        *page_csr(tables, cached, page_size),
        positions,
        slot_pages * page_size + positions % page_size,
    ]
    return [np.ascontiguousarray(array, np.int32) for array in arrays]


def mixed_metadata(
    tables: Sequence[Sequence[int]],
    cached: Sequence[int],
    new: Sequence[int],
    page_size: int,
) -> list[np.ndarray] | None:
    """MIXED_PREFILL_METADATA (model_defs/owned_kv.py) of a step with both one new token
    after cached ones (a decode row) and prompt chunks; None for a step without both."""
    decode = [i for i, (c, n) in enumerate(zip(cached, new, strict=True)) if c and n == 1]
    prompts = [i for i in range(len(new)) if i not in set(decode)]
    if not decode or not prompts:
        return None
    q_indptr, _, _, _, positions, slots = prefill_metadata(tables, cached, new, page_size)
    decode_pages = page_csr([tables[i] for i in decode], [cached[i] + 1 for i in decode], page_size)
    prompt_arrays = prefill_metadata(
        [tables[i] for i in prompts],
        [cached[i] for i in prompts],
        [new[i] for i in prompts],
        page_size,
    )[:4]
    decode_rows = q_indptr[decode]
    prompt_rows = np.concatenate([np.arange(q_indptr[i], q_indptr[i + 1]) for i in prompts])
    row_order = np.argsort(np.concatenate([decode_rows, prompt_rows]), kind="stable")
    arrays = [decode_rows, *decode_pages, prompt_rows, *prompt_arrays, row_order]
    return [np.ascontiguousarray(array, np.int32) for array in [*arrays, positions, slots]]


class OwnedKVCache:
    """Every layer's KV pages, the page table, and the decode buckets' metadata buffers."""

    def __init__(
        self,
        config: KVCacheConfig,
        spec: OwnedPagesSpec,
        dtype: str,
        max_model_len: int,
        empty: Callable[[tuple[int, ...], str], Any],
        to_device: Callable[[np.ndarray], Any],
        ragged: FlashInferRaggedAttention | None = None,
    ) -> None:
        """`empty(shape, dtype)`: an uninitialised device tensor (pages are read only where
        written); `to_device(array)`: a device copy; `ragged`: the artifact's registered
        own-chunk product (flashinfer_ragged.py), planned for each prefill's rows."""
        self.config = config
        page = config.page_size
        num_pages = -(-config.max_total_seq_len // page)
        shape = (num_pages, 2, spec.kv_heads, page, spec.head_dim)
        self.pages = [empty(shape, dtype) for _ in range(spec.layers)]
        self.table = OwnedPageTable(num_pages, page)
        self._pages_per_row = -(-max_model_len // page)
        self._to_device = to_device
        self._buckets: dict[int, DecodeStepBuffers] = {}
        self._forward: tuple[list[int], list[int], list[int]] | None = None
        self._ragged = ragged

    def add_sequence(self, seq_id: int) -> None:
        self.table.add_sequence(seq_id)

    def remove_sequence(self, seq_id: int) -> None:
        self.table.remove_sequence(seq_id)

    def fork_sequence(self, parent_id: int, child_id: int, fork_pos: int = -1) -> None:
        self.table.fork_sequence(parent_id, child_id, fork_pos)

    def popn(self, seq_id: int, count: int) -> None:
        self.table.popn(seq_id, count)

    def clear(self) -> None:
        self.table.clear()

    def available_pages(self) -> int:
        return self.table.available_pages()

    def sequence_length(self, seq_id: int) -> int:
        return self.table.sequence_length(seq_id)

    def begin_forward(self, seq_ids: Sequence[int], lengths: Sequence[int]) -> None:
        """Give the sequences the pages for this forward's `lengths` new tokens."""
        cached = [self.table.sequence_length(seq_id) for seq_id in seq_ids]
        self.table.grow(seq_ids, lengths)
        self._forward = (list(seq_ids), cached, list(lengths))

    def end_forward(self) -> None:
        self._forward = None

    def _current(self) -> tuple[list[int], list[int], list[int]]:
        if self._forward is None:
            raise RuntimeError("owned KV metadata asked for outside a forward")
        return self._forward

    def prefill_arguments(self, functions: Collection[str]) -> tuple[str, list[Any]]:
        """The function the current forward runs, of those the artifact has (`functions`):
        OWNED_PREFILL_FRESH when none of its sequences has anything cached,
        OWNED_PREFILL_MIXED for one-token rows of cached sequences beside such prompts, else
        OWNED_PREFILL; and its metadata on the device (model_defs/owned_kv.py's
        FRESH_PREFILL_METADATA, MIXED_PREFILL_METADATA, PREFILL_METADATA)."""
        seq_ids, cached, new = self._current()
        tables = [self.table.pages(seq_id) for seq_id in seq_ids]
        page_size = self.config.page_size
        arrays = prefill_metadata(tables, cached, new, page_size)
        name = OWNED_PREFILL
        if OWNED_PREFILL_FRESH in functions and not any(cached):
            q_indptr, _, _, _, positions, slots = arrays
            name, arrays = OWNED_PREFILL_FRESH, [q_indptr, np.zeros_like(new), positions, slots]
        elif OWNED_PREFILL_MIXED in functions:
            mixed = mixed_metadata(tables, cached, new, page_size)
            if mixed is not None:
                name, arrays = OWNED_PREFILL_MIXED, mixed
        if self._ragged is not None:
            # The own-chunk rows: all of them, or a mixed step's prompt rows.
            self._ragged.plan(arrays[5] if name == OWNED_PREFILL_MIXED else arrays[0])
        return name, [self._to_device(np.asarray(array, np.int32)) for array in arrays]

    def decode_arguments(self) -> tuple[int, list[Any]]:
        """The current one-token forward's bucket and its DECODE_METADATA, copied into the
        bucket's fixed buffer (the same tensors on every step of that bucket)."""
        seq_ids, cached, new = self._current()
        if any(count != 1 for count in new):
            raise ValueError(f"a decode step appends one token a sequence; got {new}")
        rows = decode_bucket(len(seq_ids))
        if rows not in self._buckets:
            self._buckets[rows] = DecodeStepBuffers(
                rows, self._pages_per_row, self.config.page_size, self._to_device
            )
        buffers = self._buckets[rows]
        tables = [self.table.pages(seq_id) for seq_id in seq_ids]
        buffers.update(tables, [length + 1 for length in cached])
        return rows, buffers.kernel_arguments()
