"""The KV pool in blocks: which sequence holds which block, what is shared, cached or free,
carried out on TVM's paged KV cache so that both always agree.

Why it exists: TVM's PagedKVCache allocates its 16-token pages itself and shares them only
through `fork_sequence` (a child shares its parent's pages up to the fork). It knows nothing
of a pool bounded for scheduling, of reference counts or of a prefix cache. This manager
keeps vLLM's accounting on top (fixed-size blocks, reference counts, block hashes, eviction
of free cached blocks) and drives the cache only with operations under which the two stay in
step:

- a block is `block_size` tokens, a whole number of TVM pages; every fork and popn is at a
  block boundary, so TVM never copies a page and a block's pages belong to it alone;
- each running sequence owns one TVM sequence (a *KV sequence*). A sequence admitted with a
  prefix-cache hit is forked from a KV sequence holding the hit blocks, so TVM shares their
  pages, and the hit blocks' reference counts go up;
- when a sequence ends (finish, abort, error, preemption), its KV sequence is cut back
  (popn) to its leading cached blocks and kept as a *cached* KV sequence that only holds
  them, or removed when it holds nothing another KV sequence does not. Evicting a free cached
  block cuts every cached KV sequence holding it back to just before it. (Blocks after a
  free block in a KV sequence are free too: a sequence using one would be using the first.)

A model with recurrent layers also gives each running sequence a slot of its recurrent-state
pool (recurrent_slots.py): taken with the blocks at `allocate`, given back with them at
`free`, so admission waits for a slot as it waits for blocks.

A block's pages go back to TVM exactly when the last KV sequence holding it lets go, which is
when the block returns to the free list here; blocks reserved for a step get their pages in
that step's forward. So TVM always has at least the pages of the free blocks, and a forward
this manager allowed cannot run out of pages.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.kv.kv_cache import PagedKVCache
from vllm_tvm.runtime.kv.prefix_cache import BlockHash, PrefixCache, extend_block_hashes
from vllm_tvm.runtime.kv.recurrent_slots import RecurrentSlots

if TYPE_CHECKING:
    from vllm_tvm.runtime.requests.sequence import EngineSequence

FIRST_KV_SEQUENCE_ID = 1 << 20
"""KV sequence ids start here, leaving small ids free for direct use of the cache (tools)."""


@dataclass
class Block:
    """One block of `block_size` token slots.

    `ref_count` counts running sequences using it; `holders` the KV sequences (running or
    cached) whose pages contain it. A registered block has its `block_hash` and `parent` (the
    block before it in every KV sequence holding it).
    """

    block_id: int
    ref_count: int = 0
    holders: set[int] = field(default_factory=set)
    block_hash: BlockHash | None = None
    parent: int | None = None


class BlockManager:
    """Blocks of one KV cache for the scheduler: admit, grow, cache and free sequences."""

    def __init__(
        self,
        kv_cache: PagedKVCache,
        config: CacheConfig,
        recurrent_slots: RecurrentSlots | None = None,
    ) -> None:
        """`recurrent_slots`: the model's recurrent-state slots (None: it keeps none)."""
        self.recurrent_slots = recurrent_slots
        self.block_size = config.block_size
        self.num_blocks = config.num_blocks
        self.enable_prefix_caching = config.enable_prefix_caching
        self._kv = kv_cache
        self._blocks: dict[int, Block] = {}
        self._free_ids: deque[int] = deque(range(config.num_blocks))
        self._tables: dict[int, list[int]] = {}
        self._cached_kv_ids: set[int] = set()
        self._registered_upto: dict[int, int] = {}
        self._cache = PrefixCache()
        self._next_kv_id = FIRST_KV_SEQUENCE_ID

    # ---- reading ----

    @property
    def num_free_blocks(self) -> int:
        """Blocks a sequence can get now: never used, or cached but used by no sequence."""
        return len(self._free_ids) + self._cache.num_evictable

    @property
    def num_empty_blocks(self) -> int:
        """Blocks holding no KV at all (not even a cached prefix): TVM has their pages free."""
        return len(self._free_ids)

    @property
    def num_used_blocks(self) -> int:
        """Blocks some running sequence holds."""
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of the pool held by running sequences (vLLM's kv_cache_usage_perc)."""
        return self.num_used_blocks / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered in the prefix cache (in use or free)."""
        return len(self._cache)

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ---- admission ----

    def match_prefix(self, seq: EngineSequence) -> list[int]:
        """The cached blocks that start `seq`'s tokens (none when prefix caching is off or
        the sequence wants prompt logprobs, which need every position computed). At least
        one token is always left to compute, so its logits exist."""
        if not self.enable_prefix_caching or seq.params.prompt_logprobs is not None:
            return []
        limit = (seq.num_tokens - 1) // self.block_size
        self._extend_hashes(seq, limit)
        hit = self._cached_chain(seq.block_hashes[:limit])
        if seq.images is not None and len(hit) * self.block_size < seq.images.prefill_floor:
            return []
        return hit

    def _extend_hashes(self, seq: EngineSequence, num_blocks: int) -> None:
        """Hash `seq`'s first `num_blocks` full blocks, keyed by its images' digests.

        A prompt with images is matched all or nothing up to its last image: a hit must
        reach through the end of the last image (`prefill_floor`), or it is not used and
        the prompt is computed from its first token. Why: the image prefill
        (model_defs/image_block_attention.py) gives an image's soft tokens their two-way
        attention by a dense attention over the forward's own chunk, so every key they may
        see must be in that chunk, which holds only when the chunk starts at the prompt's
        first token. A hit ending before or inside an image would leave that image's rows
        blind to the cached keys before it (vLLM likewise never splits a bidirectional
        image between cached and computed tokens). Blocks that hold soft tokens are only
        ever registered whole and after the prefill that computed the entire image, so a
        cached block's keys and values are those of the complete image its digest names."""
        placeholders = () if seq.images is None else seq.images.placeholders
        extend_block_hashes(
            seq.block_hashes, seq.token_ids, self.block_size, num_blocks, placeholders
        )

    def cached_prefix_length(self, token_ids: list[int]) -> int:
        """How many leading tokens of `token_ids` the prefix cache holds (whole blocks)."""
        hashes: list[BlockHash] = []
        extend_block_hashes(hashes, token_ids, self.block_size, len(token_ids))
        return len(self._cached_chain(hashes)) * self.block_size

    def _cached_chain(self, hashes: list[BlockHash]) -> list[int]:
        """The cached blocks that follow one another under `hashes`, from the first on."""
        chain: list[int] = []
        for block_hash in hashes:
            block_id = self._cache.lookup(block_hash)
            if block_id is None or self._blocks[block_id].parent != (chain[-1] if chain else None):
                break
            chain.append(block_id)
        return chain

    def can_allocate(self, hit: list[int], num_tokens: int) -> bool:
        """Whether a sequence starting with the cached blocks `hit` can get blocks for its
        first `num_tokens` tokens (and a recurrent-state slot, when the model keeps state)."""
        if self.recurrent_slots is not None and not self.recurrent_slots.num_free:
            return False
        reused_free = sum(1 for block_id in hit if self._cache.is_free(block_id))
        needed = self._blocks_for(num_tokens) - len(hit)
        return needed <= self.num_free_blocks - reused_free

    def allocate(self, seq: EngineSequence, hit: list[int], num_tokens: int) -> None:
        """Give `seq` a KV sequence sharing the cached blocks `hit` (its first tokens, now
        computed) and blocks for its first `num_tokens` tokens, and a zeroed recurrent-state
        slot when the model keeps state. Check `can_allocate` first."""
        assert seq.kv_id is None, f"sequence {seq.seq_id} already has KV"
        if self.recurrent_slots is not None:
            self.recurrent_slots.take(seq)
        kv_id = self._next_kv_id
        self._next_kv_id += 1
        if hit:
            holder = next(iter(self._blocks[hit[-1]].holders))
            self._kv.fork_sequence(holder, kv_id, len(hit) * self.block_size)
        else:
            self._kv.add_sequence(kv_id)
        self._tables[kv_id] = list(hit)
        self._registered_upto[kv_id] = len(hit)
        for block_id in hit:
            block = self._blocks[block_id]
            if block.ref_count == 0:
                self._cache.mark_used(block_id)
            block.ref_count += 1
            block.holders.add(kv_id)
        seq.kv_id = kv_id
        seq.num_computed_tokens = seq.num_cached_tokens = len(hit) * self.block_size
        self._reserve(kv_id, num_tokens)

    # ---- growth ----

    def can_grow(self, seq: EngineSequence, num_tokens: int) -> bool:
        """Whether `seq` can get blocks to hold `num_tokens` tokens in all."""
        assert seq.kv_id is not None
        needed = self._blocks_for(num_tokens) - len(self._tables[seq.kv_id])
        return needed <= 0 or needed <= self.num_free_blocks

    def grow(self, seq: EngineSequence, num_tokens: int) -> None:
        """Reserve blocks so `seq` holds `num_tokens` tokens in all (check `can_grow`)."""
        assert seq.kv_id is not None
        self._reserve(seq.kv_id, num_tokens)

    def grow_each_by_one(self, seqs: list[EngineSequence]) -> bool:
        """Reserve room for one more token in each of `seqs` (in order, as `can_grow` then
        `grow` of `num_computed_tokens + 1` each would) when the free blocks suffice for all
        of them; False, and nothing reserved, when they do not. Only sequences at a block
        boundary need a block, so most steps reserve nothing."""
        tables, block_size = self._tables, self.block_size
        short = [
            seq
            for seq in seqs
            if len(tables[seq.kv_id]) * block_size <= seq.num_computed_tokens  # type: ignore[index]
        ]
        if not short:
            return True
        needed = sum(
            self._blocks_for(seq.num_computed_tokens + 1) - len(tables[seq.kv_id])  # type: ignore[index]
            for seq in short
        )
        if needed > self.num_free_blocks:
            return False
        for seq in short:
            self._reserve(seq.kv_id, seq.num_computed_tokens + 1)  # type: ignore[arg-type]
        return True

    def drop_last_tokens(self, seq: EngineSequence, count: int) -> None:
        """Take back the last `count` tokens a forward appended to `seq`'s KV sequence
        (drafts the model rejected). They lie past its computed tokens, in blocks no one
        else holds and that are not registered, which stay reserved for the sequence."""
        assert seq.kv_id is not None
        if count:
            self._kv.popn(seq.kv_id, count)

    def _reserve(self, kv_id: int, num_tokens: int) -> None:
        table = self._tables[kv_id]
        while len(table) * self.block_size < num_tokens:
            if not self._free_ids:
                self._evict(self._cache.oldest_free())
            block_id = self._free_ids.popleft()
            self._blocks[block_id] = Block(block_id, ref_count=1, holders={kv_id})
            table.append(block_id)

    # ---- prefix caching ----

    def cache_full_blocks(self, seq: EngineSequence) -> None:
        """Register the blocks `seq` has completely computed, so later sequences can share
        them. A block is registered only after its parent and only if its hash is new (a
        duplicate computed concurrently elsewhere stays private, and so do the blocks after
        it, so every registered chain lies in one KV sequence)."""
        if not self.enable_prefix_caching or seq.kv_id is None:
            return
        kv_id = seq.kv_id
        full = seq.num_computed_tokens // self.block_size
        if full <= self._registered_upto[kv_id]:  # most steps: no block newly full
            return
        table = self._tables[kv_id]
        self._extend_hashes(seq, full)
        index = self._registered_upto[kv_id]
        while index < full:
            block = self._blocks[table[index]]
            parent = table[index - 1] if index else None
            if block.block_hash is None:
                if parent is not None and self._blocks[parent].block_hash is None:
                    break
                block_hash = seq.block_hashes[index]
                if self._cache.lookup(block_hash) is not None:
                    break
                block.block_hash, block.parent = block_hash, parent
                self._cache.register(block_hash, block.block_id)
            index += 1
        self._registered_upto[kv_id] = index

    def reset_prefix_cache(self) -> None:
        """Forget every cached block; free cached blocks return to the free list."""
        for kv_id in list(self._cached_kv_ids):
            self._truncate(kv_id, 0)
        for block in self._blocks.values():
            block.block_hash = block.parent = None
        self._cache.clear()

    # ---- release ----

    def free(self, seq: EngineSequence) -> None:
        """`seq` lets go of its blocks and its recurrent-state slot (finished, aborted, failed
        or preempted). Its leading cached blocks stay cached, held by its KV sequence cut back
        to them."""
        if self.recurrent_slots is not None:
            self.recurrent_slots.release(seq)
        kv_id = seq.kv_id
        if kv_id is None:
            return
        table = self._tables[kv_id]
        for block_id in table:
            self._blocks[block_id].ref_count -= 1
        keep = 0
        while keep < len(table) and self._blocks[table[keep]].block_hash is not None:
            keep += 1
        while keep and len(self._blocks[table[keep - 1]].holders) > 1:
            keep -= 1
        released = list(table)
        self._truncate(kv_id, keep)
        if keep:
            self._cached_kv_ids.add(kv_id)
        for block_id in reversed(released):
            block = self._blocks.get(block_id)
            if block is not None and block.ref_count == 0 and block.block_hash is not None:
                self._cache.mark_free(block_id)
        seq.kv_id = None
        seq.num_computed_tokens = 0

    def _truncate(self, kv_id: int, keep: int) -> None:
        """Cut KV sequence `kv_id` back to its first `keep` blocks (0: remove it)."""
        table = self._tables[kv_id]
        dropped = table[keep:]
        if keep == 0:
            self._kv.remove_sequence(kv_id)
            del self._tables[kv_id], self._registered_upto[kv_id]
            self._cached_kv_ids.discard(kv_id)
        else:
            length = self._kv.sequence_length(kv_id)
            if length > keep * self.block_size:
                self._kv.popn(kv_id, length - keep * self.block_size)
            del table[keep:]
            self._registered_upto[kv_id] = min(self._registered_upto[kv_id], keep)
        for block_id in dropped:
            block = self._blocks[block_id]
            block.holders.discard(kv_id)
            if not block.holders:
                assert block.ref_count == 0, f"block {block_id} freed while in use"
                if block.block_hash is not None:
                    self._cache.unregister(block.block_hash)
                del self._blocks[block_id]
                self._free_ids.append(block_id)

    def _evict(self, block_id: int) -> None:
        """Reclaim a free cached block (and the blocks after it in the KV sequences holding
        it, all free as well)."""
        for kv_id in list(self._blocks[block_id].holders):
            assert kv_id in self._cached_kv_ids, "a free block is held only by cached KV"
            self._truncate(kv_id, self._tables[kv_id].index(block_id))
