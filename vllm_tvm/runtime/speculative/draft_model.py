"""Drafts decoded by a draft model: a smaller model with the target's vocabulary proposes
the next tokens of every drafted row, batched.

Why it exists: an n-gram lookup only predicts text that repeats; a draft model predicts any
text its smaller network has learnt, at the cost of its own forwards. It runs its own
compiled artifact (draft_runner.py) with its own paged KV cache, one KV sequence per engine
sequence, holding a prefix of that sequence's tokens. A step proposes for its drafted rows
together:
1. rollback: the drafts this cache was fed last step that the target did not commit are
   popped (done lazily here, once the commit is known from the sequence's tokens);
2. catch-up: the sequence's tokens not yet in the draft cache (the whole prompt the first
   time, then the last committed tokens) run in ragged prefills no longer than the draft's
   prefill chunk, the last one giving the logits of draft 1;
3. up to k - 1 batched decodes of the drafts give drafts 2..k.
A greedy request drafts the draft model's argmax (its verification compares argmaxes). A
sampled request draws draft i from q_i = softmax(draft logits / temperature) with the
request's own randomness, and q_i goes with the draft to the rejection rule (verify.py), so
the committed tokens keep the target's distribution whatever the draft model says.
Before the drafts are decoded, the draft cache's free pages are counted: the KV sequences of
sequences not drafted this step are dropped first (they catch up when drafted again), then
rows that still do not fit go undrafted this step.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.sampling.sampler import Sampler, inverse_cdf

if TYPE_CHECKING:
    from vllm_tvm.runtime.requests.sequence import EngineSequence


class DraftProposal(NamedTuple):
    """Drafted tokens of one row and, for a sampled request, the distribution each was
    drawn from (`probs[i]` over the vocabulary; None: each draft is certain)."""

    token_ids: list[int]
    probs: np.ndarray | None


class CatchUpChunk(NamedTuple):
    """Tokens fed to `seq`'s draft KV sequence from its position `start` on."""

    seq: EngineSequence
    start: int
    token_ids: list[int]


@dataclass
class _DraftSequence:
    """One engine sequence in the draft cache: its first `num_committed` tokens, then the
    drafts `fed` to the draft model after them."""

    kv_id: int
    num_committed: int = 0
    fed: list[int] = field(default_factory=list)


class DraftModelProposer:
    """Proposes drafts with a draft model; `forget` a sequence when it ends."""

    def __init__(self, runner: ModelRunner, sampler: Sampler) -> None:
        self.runner = runner
        self.sampler = sampler
        self._states: dict[EngineSequence, _DraftSequence] = {}
        self._kv_ids = itertools.count()

    @property
    def num_sequences(self) -> int:
        """Engine sequences holding a KV sequence in the draft cache."""
        return len(self._states)

    def forget(self, seq: EngineSequence) -> None:
        """Drop `seq`'s KV sequence from the draft cache (when it ends)."""
        self._evict(seq)

    def _evict(self, seq: EngineSequence) -> None:
        """Drop `seq`'s KV sequence from the draft cache (it catches up when drafted)."""
        state = self._states.pop(seq, None)
        if state is not None:
            self.runner.kv_cache.remove_sequence(state.kv_id)

    def reset(self) -> None:
        """Drop every KV sequence (after a failed draft forward left the cache unknown)."""
        self.runner.kv_cache.clear()
        self._states.clear()

    def propose(self, requests: Sequence[tuple[EngineSequence, int]]) -> list[DraftProposal]:
        """Up to `room` drafts for each (sequence, room) of `requests`, in order (none for
        a row the draft cache or the draft model's context cannot hold)."""
        for seq, _ in requests:
            self._roll_back(seq)
        rooms = self._fit(requests)
        active = [(seq, room) for (seq, _), room in zip(requests, rooms, strict=True) if room]
        drafted: dict[EngineSequence, list[int]] = {seq: [] for seq, _ in active}
        probs: dict[EngineSequence, list[np.ndarray]] = {seq: [] for seq, _ in active}
        logits = self._catch_up([seq for seq, _ in active])
        live = active
        while True:
            for (seq, _), row in zip(live, logits, strict=True):
                token_id, q = self._choose(seq, row)
                drafted[seq].append(token_id)
                probs[seq].append(q)
            live = [(seq, room) for seq, room in live if room > len(drafted[seq])]
            if not live:
                break
            logits = self._feed_drafts(
                [seq for seq, _ in live], [drafted[seq][-1] for seq, _ in live]
            )
        return [
            DraftProposal(drafted[seq], _stacked(probs[seq])) if seq in drafted else _NONE
            for seq, _ in requests
        ]

    def _roll_back(self, seq: EngineSequence) -> None:
        """Keep of `seq`'s fed drafts those the target committed (never its last token, which
        the catch-up feeds); a sequence new to the draft cache gets a KV sequence."""
        state = self._states.get(seq)
        if state is None:
            state = self._states[seq] = _DraftSequence(next(self._kv_ids))
            self.runner.kv_cache.add_sequence(state.kv_id)
            return
        tokens = seq.token_ids
        kept = 0
        for offset, token_id in enumerate(state.fed):
            position = state.num_committed + offset
            if position >= len(tokens) - 1 or tokens[position] != token_id:
                break
            kept += 1
        if len(state.fed) > kept:
            self.runner.kv_cache.popn(state.kv_id, len(state.fed) - kept)
        state.num_committed += kept
        state.fed = []

    def _fit(self, requests: Sequence[tuple[EngineSequence, int]]) -> list[int]:
        """Each request's room, cut to the draft model's context; 0 for those whose pages do
        not fit once the sequences not drafted now left the cache."""
        limit = self.runner.max_model_len
        rooms = [min(room, limit - seq.num_tokens + 1) for seq, room in requests]
        pages = [
            self._pages_needed(seq, room) for (seq, _), room in zip(requests, rooms, strict=True)
        ]
        cache = self.runner.kv_cache
        if sum(pages) > cache.available_pages():
            drafted = {seq for seq, _ in requests}
            for idle in [seq for seq in self._states if seq not in drafted]:
                self._evict(idle)
        free = cache.available_pages()
        for index, needed in enumerate(pages):
            if rooms[index] <= 0 or needed > free:
                rooms[index] = 0
            else:
                free -= needed
        return rooms

    def _pages_needed(self, seq: EngineSequence, room: int) -> int:
        """New pages `seq` takes for its tokens and `room - 1` fed drafts."""
        if room <= 0:
            return 0
        size = self.runner.kv_config.page_size
        held = self._states[seq].num_committed
        return -(-(seq.num_tokens + room - 1) // size) - -(-held // size)

    def _feed_drafts(self, seqs: list[EngineSequence], token_ids: list[int]) -> np.ndarray:
        """Feed each sequence its last draft; the logits after it (a row per sequence)."""
        for seq, token_id in zip(seqs, token_ids, strict=True):
            self._states[seq].fed.append(token_id)
        return self.runner.decode([self._states[seq].kv_id for seq in seqs], token_ids)

    def _pending(self, seq: EngineSequence) -> list[int]:
        """The tokens of `seq` its draft KV sequence still lacks."""
        return seq.token_ids[self._states[seq].num_committed :]

    def _catch_up(self, seqs: list[EngineSequence]) -> np.ndarray:
        """Feed each sequence's tokens missing from the draft cache; the logits after each
        sequence's last token (a row per sequence, in order)."""
        chunk_size = self.runner.kv_config.prefill_chunk_size
        pending = [(index, self._pending(seq)) for index, seq in enumerate(seqs)]
        rows = np.empty((len(seqs), self.runner.vocab_size), dtype=np.float32)
        while pending:
            parts: list[CatchUpChunk] = []
            finishing, positions = [], []
            room, offset = chunk_size, 0
            while pending and room:
                index, tokens = pending[0]
                chunk = tokens[:room]
                state = self._states[seqs[index]]
                parts.append(CatchUpChunk(seqs[index], state.num_committed, chunk))
                offset += len(chunk)
                room -= len(chunk)
                state.num_committed += len(chunk)
                if len(chunk) == len(tokens):
                    finishing.append(index)
                    positions.append(offset - 1)
                    pending.pop(0)
                else:
                    pending[0] = (index, tokens[len(chunk) :])
            logits = self._prefill(parts, positions or [offset - 1])
            if finishing:
                rows[finishing] = logits
        return rows

    def _prefill(self, parts: list[CatchUpChunk], positions: list[int]) -> np.ndarray:
        """One ragged draft forward over `parts`; the logits rows at `positions`."""
        kv_ids = [self._states[part.seq].kv_id for part in parts]
        return self.runner.prefill(kv_ids, [part.token_ids for part in parts], positions)

    def _choose(self, seq: EngineSequence, logits: np.ndarray) -> tuple[int, np.ndarray | None]:
        """The draft after `logits` for `seq`'s request, and q when it was drawn."""
        params = seq.params
        if params.greedy:
            return int(logits.argmax()), None
        scaled = logits.astype(np.float64) / params.temperature
        weights = np.exp(scaled - scaled.max())
        q = weights / weights.sum()
        token_id = inverse_cdf(q[None, :], self.sampler.uniforms([seq.sampling]))[0]
        return int(token_id), q


_NONE = DraftProposal([], None)


def _stacked(probs: list[np.ndarray | None]) -> np.ndarray | None:
    return None if probs[0] is None else np.stack(probs)  # type: ignore[arg-type]
