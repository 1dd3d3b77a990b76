"""The attention metadata of one decode step, in fixed device buffers per batch-size bucket.

Why: TVM's `PagedKVCache` plans every step's attention on the host (`begin_forward`) into an
auxiliary device buffer whose offsets move from step to step, so a CUDA graph recorded for
one step reads stale addresses in the next, and the step cannot be captured whole. Here a
bucket of `rows` sequences owns one int32 device buffer, allocated once, holding every
array the decode kernels read (TVM's `batch_decode_paged_kv` and
`tir_kv_cache_transpose_append` contract); a step packs its block tables and lengths into
one host array and copies it over with one host-to-device copy. The views handed to the
compiled step never move, which is what a captured graph needs: it replays the addresses it
was recorded with.

Split KV: one row's pages are cut into `splits` consecutive chunks, each attended by its
own *part* (a row of the kernel's batch: rows * splits parts), and the parts' results are
merged by their log-sum-exp afterwards. Why: TVM's decode kernel runs one thread block per
(part, KV head), so a lone row of 8 KV heads kept 8 of the H200's 132 multiprocessors busy.

Layout of the buffer (int32, `rows` = the bucket's size, `S` = splits, `P` = pages a row
may hold):

| part | length | meaning |
|---|---|---|
| `positions` | rows * S | the row's new token's position, for each of its parts (RoPE) |
| `page_indptr` | rows * S + 1 | CSR offsets of each part's pages in `page_values` |
| `page_values` | rows * P | the pages of every row, row after row (unused tail zero) |
| `last_page_len` | rows * S | tokens in each part's last page (full, but in a row's last part) |
| `append_slots` | rows | where the new token's K/V go: page * page_size + offset |

A part with no pages (padding rows up to the bucket, chunks past a short row's end) makes
the kernel read no key and write zeros with a log-sum-exp of -5e4, which the merge weighs
zero; a padding row's append slot is -1, which the append kernel skips.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm

SKIPPED_SLOT = -1
"""The append slot of a padding row: TVM's append kernel writes nothing for it."""


@dataclass(frozen=True)
class DecodeStepLayout:
    """Where each array of a bucket's metadata buffer starts (in int32 elements)."""

    rows: int
    pages_per_row: int
    splits: int = 1

    @property
    def parts(self) -> int:
        return self.rows * self.splits

    @property
    def positions(self) -> tuple[int, int]:
        """First, so its view starts the buffer: the model's rotary kernel (a TE kernel)
        takes no tensor with a byte offset."""
        return 0, self.parts

    @property
    def page_indptr(self) -> tuple[int, int]:
        return self._after(self.positions), self.parts + 1

    @property
    def page_values(self) -> tuple[int, int]:
        return self._after(self.page_indptr), self.rows * self.pages_per_row

    @property
    def last_page_len(self) -> tuple[int, int]:
        return self._after(self.page_values), self.parts

    @property
    def append_slots(self) -> tuple[int, int]:
        return self._after(self.last_page_len), self.rows

    @property
    def size(self) -> int:
        return self._after(self.append_slots)

    @staticmethod
    def _after(part: tuple[int, int]) -> int:
        return part[0] + part[1]


def pack_decode_step(
    layout: DecodeStepLayout,
    block_tables: Sequence[Sequence[int]],
    seq_lens: Sequence[int],
    page_size: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The metadata of one decode step as one int32 array in `layout`.

    `block_tables[i]` are row i's pages in order; `seq_lens[i]` its length after this step's
    token (so at least 1). Rows past `len(seq_lens)` are padding."""
    batch = len(seq_lens)
    if batch != len(block_tables):
        raise ValueError(f"{len(block_tables)} block tables for {batch} sequence lengths")
    if batch > layout.rows:
        raise ValueError(f"a decode step of {batch} rows exceeds its bucket of {layout.rows}")
    packed = np.zeros(layout.size, np.int32) if out is None else out
    packed.fill(0)
    lengths = np.asarray(seq_lens, np.int64)
    if batch and lengths.min() < 1:
        raise ValueError(f"every decoded sequence holds its new token; got lengths {seq_lens}")
    pages = (lengths + page_size - 1) // page_size
    for row, (table, needed) in enumerate(zip(block_tables, pages, strict=True)):
        if len(table) < needed:
            raise ValueError(
                f"row {row} of length {seq_lens[row]} needs {needed} pages, has {len(table)}"
            )
        if needed > layout.pages_per_row:
            raise ValueError(
                f"row {row} needs {needed} pages; the bucket holds {layout.pages_per_row} a row"
            )
    part_pages, part_last = _split_rows(pages, lengths, layout, page_size)
    start, _ = layout.page_indptr
    packed[start + 1 : start + layout.parts + 1] = np.cumsum(part_pages)
    start, _ = layout.page_values
    flat = [
        page for table, needed in zip(block_tables, pages, strict=True) for page in table[:needed]
    ]
    packed[start : start + len(flat)] = flat
    start, _ = layout.last_page_len
    packed[start : start + layout.parts] = part_last
    start, _ = layout.positions
    packed[start : start + batch * layout.splits] = np.repeat(lengths - 1, layout.splits)
    start, _ = layout.append_slots
    slots = np.full(layout.rows, SKIPPED_SLOT, np.int64)
    for row, table in enumerate(block_tables):
        position = int(lengths[row]) - 1
        slots[row] = table[position // page_size] * page_size + position % page_size
    packed[start : start + layout.rows] = slots
    return packed


def _split_rows(
    pages: np.ndarray, lengths: np.ndarray, layout: DecodeStepLayout, page_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Pages and last-page length of every part: row r's `pages[r]` pages cut into
    `splits` consecutive chunks of ceil(pages / splits) (the last ones may be short or
    empty); only the row's final chunk ends in a partly filled page."""
    part_pages = np.zeros(layout.parts, np.int64)
    part_last = np.zeros(layout.parts, np.int64)
    for row, (count, length) in enumerate(zip(pages.tolist(), lengths.tolist(), strict=True)):
        chunk = -(-count // layout.splits)
        for split in range(layout.splits):
            taken = max(0, min(chunk, count - split * chunk))
            part = row * layout.splits + split
            part_pages[part] = taken
            ends_row = taken and split * chunk + taken == count
            part_last[part] = (
                length - (count - 1) * page_size if ends_row else page_size * bool(taken)
            )
    return part_pages, part_last


class DecodeStepBuffers:
    """One bucket's metadata: a host staging array and the device buffer it is copied to.

    The views (`page_indptr`, ..., `append_slots`) are made once and stay at the same device
    addresses for the buffers' life, so a compiled step captured into a CUDA graph with them
    reads each step's metadata after `update`."""

    def __init__(
        self,
        rows: int,
        pages_per_row: int,
        page_size: int,
        to_device: Callable[[np.ndarray], Any],
        splits: int = 1,
    ) -> None:
        """`to_device(array)`: a device tensor holding `array` (the runner's)."""
        self.layout = DecodeStepLayout(rows, pages_per_row, splits)
        self.page_size = page_size
        # A TVM host tensor (TVM wants 64-byte-aligned memory) and a numpy view of it:
        # `copyto` from it queues the copy and returns (`copyfrom` waits for the device to
        # finish everything queued before it, so the host stood idle for the whole previous
        # step: measured on the H200, the host's launch took as long as the step). A
        # host-to-device copy from pageable memory is staged at once, so the array may be
        # refilled as soon as `copyto` returns.
        self._host_tensor = tvm.runtime.empty((self.layout.size,), "int32", tvm.cpu())
        self._host = np.from_dlpack(self._host_tensor)
        self._host.fill(0)
        self.device = to_device(self._host)
        self.page_indptr = self._view(self.layout.page_indptr)
        self.page_values = self._view(self.layout.page_values)
        self.last_page_len = self._view(self.layout.last_page_len)
        self.positions = self._view(self.layout.positions)
        self.append_slots = self._view(self.layout.append_slots)

    def _view(self, part: tuple[int, int]) -> Any:
        start, length = part
        return self.device._create_view((length,), "int32", start * 4)

    def update(self, block_tables: Sequence[Sequence[int]], seq_lens: Sequence[int]) -> None:
        """Pack this step's metadata and queue its copy to the device: one copy, which runs
        in order with the steps queued before and after it."""
        pack_decode_step(self.layout, block_tables, seq_lens, self.page_size, self._host)
        self._host_tensor.copyto(self.device)

    def kernel_arguments(self) -> list[Any]:
        """The metadata in the order the compiled attention step takes it."""
        return [
            self.page_indptr,
            self.page_values,
            self.last_page_len,
            self.positions,
            self.append_slots,
        ]
