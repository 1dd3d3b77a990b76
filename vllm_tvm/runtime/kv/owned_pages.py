"""Which KV pages each sequence holds, for a pool of pages the runtime owns.

Why: with owned pages (runtime/kv/owned_kv_cache.py) no TVM cache allocates pages, so this
table does: pages of `page_size` tokens from a free list, a sequence's pages in order, and
reference counts so that a fork shares its parent's pages as TVM's cache does. It mirrors
exactly the operations block_manager.py drives a cache with (add, fork at a page boundary,
popn, remove, a forward's growth), so the block manager runs over it unchanged.

A page shared by two sequences is never written: a forward that would append into one
(a fork inside a page, then growth) is refused by name instead of corrupting the other.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class _Held:
    pages: list[int] = field(default_factory=list)
    length: int = 0


class OwnedPageTable:
    """Pages `0 .. num_pages - 1`, handed to sequences as they grow."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        self.page_size = page_size
        self._free: deque[int] = deque(range(num_pages))
        self._refs = [0] * num_pages
        self._seqs: dict[int, _Held] = {}

    def _held(self, seq_id: int) -> _Held:
        if seq_id not in self._seqs:
            raise KeyError(f"KV sequence {seq_id} does not exist")
        return self._seqs[seq_id]

    def add_sequence(self, seq_id: int) -> None:
        if seq_id in self._seqs:
            raise ValueError(f"KV sequence {seq_id} exists already")
        self._seqs[seq_id] = _Held()

    def remove_sequence(self, seq_id: int) -> None:
        held = self._held(seq_id)
        self._release(held.pages)
        del self._seqs[seq_id]

    def fork_sequence(self, parent_id: int, child_id: int, fork_pos: int = -1) -> None:
        """The child holds the parent's first `fork_pos` tokens (-1: all), sharing pages."""
        parent = self._held(parent_id)
        position = parent.length if fork_pos == -1 else fork_pos
        if not 0 <= position <= parent.length:
            raise ValueError(f"fork at {position} of a sequence of {parent.length} tokens")
        pages = parent.pages[: -(-position // self.page_size)]
        for page in pages:
            self._refs[page] += 1
        self.add_sequence(child_id)
        self._seqs[child_id] = _Held(list(pages), position)

    def popn(self, seq_id: int, count: int) -> None:
        held = self._held(seq_id)
        if not 0 <= count <= held.length:
            raise ValueError(f"popn of {count} tokens from a sequence of {held.length}")
        held.length -= count
        keep = -(-held.length // self.page_size)
        self._release(held.pages[keep:])
        del held.pages[keep:]

    def grow(self, seq_ids: Sequence[int], counts: Sequence[int]) -> None:
        """Give each sequence the pages for `count` more tokens (a forward's), and count
        them held; refused whole, before any change, when the pool or a shared page would
        not allow it."""
        needed = 0
        for seq_id, count in zip(seq_ids, counts, strict=True):
            held = self._held(seq_id)
            in_last = held.length % self.page_size
            if count and in_last and self._refs[held.pages[-1]] > 1:
                raise ValueError(
                    f"KV sequence {seq_id} would append into page {held.pages[-1]}, which "
                    "another sequence shares (a fork inside a page)"
                )
            needed += -(-(held.length + count) // self.page_size) - len(held.pages)
        if needed > len(self._free):
            raise MemoryError(f"a forward needs {needed} KV pages; {len(self._free)} are free")
        for seq_id, count in zip(seq_ids, counts, strict=True):
            held = self._seqs[seq_id]
            held.length += count
            while len(held.pages) * self.page_size < held.length:
                page = self._free.popleft()
                self._refs[page] = 1
                held.pages.append(page)

    def _release(self, pages: Sequence[int]) -> None:
        for page in pages:
            self._refs[page] -= 1
            if self._refs[page] == 0:
                self._free.append(page)

    def clear(self) -> None:
        for seq_id in list(self._seqs):
            self.remove_sequence(seq_id)

    def pages(self, seq_id: int) -> list[int]:
        return self._held(seq_id).pages

    def sequence_length(self, seq_id: int) -> int:
        return self._held(seq_id).length

    def available_pages(self) -> int:
        return len(self._free)
