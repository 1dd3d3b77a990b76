"""Automatic prefix caching: which full KV blocks hold which token prefixes, and which free
ones go first when blocks run out.

Why it exists: requests often share a prefix (a system prompt, a few-shot header, the turns
of a chat). A full block is named by a hash of its tokens chained with the hash of the block
before it, so equal hashes mean equal whole prefixes; a new request whose leading block
hashes are known reuses those blocks instead of recomputing them. Blocks nobody uses any
more stay cached until their space is needed, least recently freed first.

Media placeholders (vLLM's scheme): every image's soft tokens carry one placeholder id, so
two different images at the same positions have equal tokens but different keys and
values. A block that holds any placeholder tokens of a media item therefore also hashes
that item's content digest (and where in the item the block starts), so the same image
again is a hit and a different one is not. The chain carries it to every later block.

This module is the bookkeeping only (hashes, the hash -> block map, the eviction order); the
block manager decides what to register and carries evictions out on the KV cache.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from vllm_tvm.runtime.requests.prompt_images import MediaPlaceholder

BlockHash = bytes


def hash_block(
    parent: BlockHash | None, token_ids: Sequence[int], extra_keys: bytes = b""
) -> BlockHash:
    """The hash of a full block: its tokens (and `extra_keys`, what the tokens do not say
    about its contents) chained with the hash of the block before it."""
    digest = hashlib.blake2b(parent or b"", digest_size=16)
    digest.update(np.asarray(token_ids, dtype=np.int64).tobytes())
    digest.update(extra_keys)
    return digest.digest()


def media_extra_keys(placeholders: Sequence[MediaPlaceholder], start: int, end: int) -> bytes:
    """The extra keys of the block of token positions [start, end): for each media item
    whose placeholder tokens it touches, the item's digest and the block's start relative
    to the item's first placeholder (which part of the item the block holds)."""
    keys = bytearray()
    for item in placeholders:
        if item.offset < end and start < item.offset + item.length:
            keys += bytes.fromhex(item.digest)
            keys += (start - item.offset).to_bytes(8, "little", signed=True)
    return bytes(keys)


def extend_block_hashes(
    hashes: list[BlockHash],
    token_ids: Sequence[int],
    block_size: int,
    num_blocks: int,
    placeholders: Sequence[MediaPlaceholder] = (),
) -> None:
    """Append to `hashes` (the chain of the first blocks of `token_ids`) up to `num_blocks`
    full blocks, each keyed by the `placeholders` it touches; partial blocks are never
    hashed."""
    num_blocks = min(num_blocks, len(token_ids) // block_size)
    for index in range(len(hashes), num_blocks):
        parent = hashes[-1] if hashes else None
        start, end = index * block_size, (index + 1) * block_size
        extra = media_extra_keys(placeholders, start, end) if placeholders else b""
        hashes.append(hash_block(parent, token_ids[start:end], extra))


class PrefixCache:
    """The hash -> block map of cached full blocks, and the eviction order of the free ones.

    A registered block is either in use (some running sequence holds it) or free; free ones
    are kept in the order they were freed and the oldest is evicted first. Callers free a
    sequence's blocks last-block-first, so the tail of a prefix goes before its head.
    """

    def __init__(self) -> None:
        self._by_hash: dict[BlockHash, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_hash)

    @property
    def num_evictable(self) -> int:
        """Cached blocks that no sequence uses (their space can be reclaimed)."""
        return len(self._evictable)

    def lookup(self, block_hash: BlockHash) -> int | None:
        """The block cached under `block_hash`, if any."""
        return self._by_hash.get(block_hash)

    def register(self, block_hash: BlockHash, block_id: int) -> None:
        """Cache `block_id` under `block_hash` (the hash must be new)."""
        assert block_hash not in self._by_hash, "a hash is cached at most once"
        self._by_hash[block_hash] = block_id

    def unregister(self, block_hash: BlockHash) -> None:
        """Forget the block cached under `block_hash` (and its place in the eviction order)."""
        block_id = self._by_hash.pop(block_hash)
        self._evictable.pop(block_id, None)

    def mark_free(self, block_id: int) -> None:
        """A cached block lost its last user: it becomes the newest eviction candidate."""
        self._evictable[block_id] = None

    def mark_used(self, block_id: int) -> None:
        """A free cached block is reused by a sequence: it can no longer be evicted."""
        self._evictable.pop(block_id, None)

    def is_free(self, block_id: int) -> bool:
        """Whether `block_id` is a cached block that no sequence uses."""
        return block_id in self._evictable

    def oldest_free(self) -> int:
        """The free cached block to evict next; there must be one (see `num_evictable`)."""
        return next(iter(self._evictable))

    def clear(self) -> None:
        """Forget every cached block."""
        self._by_hash.clear()
        self._evictable.clear()
