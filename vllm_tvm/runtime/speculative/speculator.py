"""A step with drafts: which scheduled decode rows get drafted tokens, the ONE forward that
verifies them next to the step's other work, and the KV rollback of rejected drafts.

Why it exists: the scheduler hands out each decoding sequence with its one last sampled
token; the engine turns a step into one forward. Speculation widens such a decode row into
a chunk [last token, draft 1 .. draft k] of the ragged prefill, with logits at all k+1
positions (`logit_positions`), so the model scores every draft at once. The engine then
commits the accepted drafts and one more token (verify.py), and the KV cache drops what
the model computed for the rejected drafts (`BlockManager.drop_last_tokens`). Drafts come
from n-gram lookup (ngram.py), row by row, or from a draft model (draft_model.py), an EAGLE
head or an MTP layer (head_proposer.py), which decodes the drafts of all rows together before the
verify forward.

What may be drafted, so that nothing a request asked for changes:
- decode rows after the first output token (a prompt chunk or prompt logprobs need their
  own rows; a prompt's last token after a prefix-cache hit looks like a decode row, but
  its sample is the request's first token, which the engine times and counts apart);
- not a row a logits hook may mask (structured output advances its grammar token by token);
- at most `num_speculative_tokens`, and never past what the request may still output
  (`max_tokens`, the context window): accepting every draft plus the bonus token still fits;
- within the step's token budget and the free KV blocks (drafts shrink to fit; none: the
  row stays a plain decode row);
- not while the sequence backs off (backoff.py): a draft with nothing accepted pauses its
  drafting, then drafts one-token probes until one is accepted, so text the proposer
  cannot predict costs few and short wasted verify forwards.
A step in which nothing is drafted runs exactly as without speculation.

A model with recurrent state (gated delta net hybrids) folds the whole verify chunk into
each sequence's state, which cannot be cut back like KV pages. So each drafted row's slot is
saved to its snapshot row before the verify forward (kv/recurrent_pool.py); when every draft
is accepted the state is already right, and otherwise the snapshot is restored, the KV of
the whole chunk dropped and the row's computed tokens set back to before it: the next step
recomputes the last committed token, the accepted drafts and the new token as one chunk
of its ragged forward (as a preempted sequence recomputes), so no extra forward is run and
nothing of the rejected drafts remains. That row is not drafted in that step (it is not a
decode row).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from vllm_tvm.runtime.kv.block_manager import BlockManager
from vllm_tvm.runtime.kv.recurrent_pool import RecurrentStatePool
from vllm_tvm.runtime.model.batch import (
    Chunk,
    ForwardBatch,
    chunk_rope_positions,
    is_decode_row,
    ragged_batch,
    ragged_chunks,
    recurrent_slots,
)
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.sampling.device_sampling import needs_host_row
from vllm_tvm.runtime.sampling.dispatch import SamplingDispatch, failure_message
from vllm_tvm.runtime.speculative.backoff import DraftBackoff
from vllm_tvm.runtime.speculative.config import SpeculativeConfig
from vllm_tvm.runtime.speculative.draft_model import DraftModelProposer, DraftProposal
from vllm_tvm.runtime.speculative.head_proposer import HeadProposer
from vllm_tvm.runtime.speculative.ngram import NgramProposer
from vllm_tvm.runtime.speculative.verify import Verified, verify_greedy, verify_on_host

if TYPE_CHECKING:
    from vllm_tvm.runtime.requests.sequence import EngineSequence, ScheduledSequence

logger = logging.getLogger(__name__)


class DraftedRow(NamedTuple):
    """A decode row widened by `draft_token_ids` (drawn from `draft_probs`, None: certain);
    its logits rows start at `first_row`."""

    seq: EngineSequence
    draft_token_ids: list[int]
    draft_probs: np.ndarray | None
    first_row: int


class VerifyStep(NamedTuple):
    """One step with drafts: its forward, the scheduled work it runs as usual (`plain`),
    and the drafted rows."""

    batch: ForwardBatch
    plain: list[ScheduledSequence]
    drafted: list[DraftedRow]


class VerifyOutcome(NamedTuple):
    """What verification gave a drafted row: its tokens to commit, or why it failed."""

    row: DraftedRow
    verified: Verified | None
    error: str | None


class DraftCounters(Protocol):
    """Where the speculator counts its drafts and the tokens they add (the engine's
    metrics.EngineMetrics)."""

    def add_spec_decode(self, num_draft_tokens: int, num_accepted: int) -> None: ...

    def add_tokens(self, prompt: int, generated: int) -> None: ...


class Speculator:
    """Drafts decode rows, builds their verify forward and rolls back rejected drafts."""

    def __init__(
        self,
        config: SpeculativeConfig,
        block_manager: BlockManager,
        sampling: SamplingDispatch,
        metrics: DraftCounters,
        token_budget: int,
        max_model_len: int,
        draft: DraftModelProposer | None = None,
        recurrent_pool: RecurrentStatePool | None = None,
    ) -> None:
        """`draft`: the draft model of a `draft_model` configuration (None: n-grams);
        `recurrent_pool`: a hybrid model's state pool, with snapshots (module doc)."""
        self.config = config
        self.recurrent_pool = recurrent_pool
        self.draft = draft
        self.proposer = NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
        self.backoff = DraftBackoff()
        self.block_manager = block_manager
        self.sampling = sampling
        self.metrics = metrics
        self.token_budget = token_budget
        self.max_model_len = max_model_len

    def plan(self, scheduled: Sequence[ScheduledSequence]) -> VerifyStep | None:
        """The step's forward with drafts (their blocks reserved); None when no row gets
        any, and the step runs as it would without speculation."""
        budget = self.token_budget - sum(item.num_tokens for item in scheduled)
        if isinstance(self.draft, HeadProposer):
            self.draft.note_scheduled(item.seq for item in scheduled)
        if self.draft is None:
            proposals = self._ngram_proposals(scheduled, budget)
        else:
            proposals = self._model_proposals(scheduled, budget)
        pairs = list(zip(scheduled, proposals, strict=True))
        plain = [item for item, proposal in pairs if proposal is None]
        drafts = [(item.seq, proposal) for item, proposal in pairs if proposal is not None]
        if not drafts:
            return None
        if self.recurrent_pool is not None:
            for seq, _ in drafts:
                assert seq.recurrent_slot is not None
                self.recurrent_pool.save(seq.recurrent_slot)
        batch, drafted = _verify_batch(plain, drafts)
        return VerifyStep(batch, plain, drafted)

    def _ngram_proposals(
        self, scheduled: Sequence[ScheduledSequence], budget: int
    ) -> list[DraftProposal | None]:
        """Row by row: the proposer's drafts within the budget left, their blocks reserved."""
        proposals: list[DraftProposal | None] = []
        for item in scheduled:
            room = self._room(item, budget) if budget > 0 else 0
            proposed = self.proposer.propose(item.seq.token_ids, room) if room > 0 else []
            proposed = self._reserve(item.seq, proposed)
            budget -= len(proposed)
            proposals.append(DraftProposal(proposed, None) if proposed else None)
        return proposals

    def _model_proposals(
        self, scheduled: Sequence[ScheduledSequence], budget: int
    ) -> list[DraftProposal | None]:
        """The draft model's drafts of every row with room (the budget shared out in row
        order), decoded together, their blocks reserved."""
        assert self.draft is not None
        requests: list[tuple[EngineSequence, int]] = []
        indices: list[int] = []
        for index, item in enumerate(scheduled):
            room = self._room(item, budget) if budget > 0 else 0
            if room > 0:
                requests.append((item.seq, room))
                indices.append(index)
                budget -= room
        proposals: list[DraftProposal | None] = [None] * len(scheduled)
        if not requests:
            return proposals
        try:
            drafted = self.draft.propose(requests)
        except Exception:  # the draft cache is unknown now: start it afresh, draft nothing
            logger.exception("the draft model failed; this step runs without drafts")
            self.draft.reset()
            return proposals
        for index, (seq, _), proposal in zip(indices, requests, drafted, strict=True):
            kept = self._reserve(seq, proposal.token_ids)
            if kept:
                probs = None if proposal.probs is None else proposal.probs[: len(kept)]
                proposals[index] = DraftProposal(kept, probs)
        return proposals

    def _room(self, item: ScheduledSequence, budget: int) -> int:
        """How many drafts `item` may take: none for rows that must not be drafted."""
        seq = item.seq
        if (
            not seq.output_token_ids
            or not is_decode_row(item)
            or self.sampling.may_mask(seq)
            or self.backoff.pauses(seq)
        ):
            return 0
        room = min(self.backoff.limit(seq, self.config.num_speculative_tokens), budget)
        room = min(room, self.max_model_len - seq.num_tokens - 1)
        if seq.params.max_tokens is not None:
            room = min(room, seq.params.max_tokens - len(seq.output_token_ids) - 1)
        return room

    def _reserve(self, seq: EngineSequence, proposed: list[int]) -> list[int]:
        """`proposed`, shortened until `seq`'s blocks can hold it, the blocks reserved."""
        manager = self.block_manager
        proposed = list(proposed)
        while proposed and not manager.can_grow(seq, seq.num_tokens + len(proposed)):
            proposed.pop()
        if proposed:
            manager.grow(seq, seq.num_tokens + len(proposed))
        return proposed

    def verify(self, step: VerifyStep, logits: DeviceLogits) -> list[VerifyOutcome]:
        """Each drafted row's accepted drafts and next token, from the step's logits (rows
        that failed to sample carry their error); the acceptance is counted in the
        metrics."""
        targets: np.ndarray | None = None  # every row's argmax, taken once when needed
        outcomes: list[VerifyOutcome] = []
        for row in step.drafted:
            rows = slice(row.first_row, row.first_row + len(row.draft_token_ids) + 1)
            try:
                if _greedy_on_device(row.seq):
                    targets = logits.argmax() if targets is None else targets
                    verified = verify_greedy(targets[rows].tolist(), row.draft_token_ids)
                else:
                    values = logits.numpy()[rows]
                    verified = verify_on_host(
                        self.sampling.sampler,
                        values,
                        row.seq.sampling,
                        row.draft_token_ids,
                        row.draft_probs,
                    )
            except Exception as err:  # this row alone fails, as in sampling/dispatch.py
                outcomes.append(VerifyOutcome(row, None, failure_message(err)))
                continue
            self.metrics.add_spec_decode(len(row.draft_token_ids), verified.num_accepted)
            self.backoff.record(row.seq, verified.num_accepted)
            outcomes.append(VerifyOutcome(row, verified, None))
        return outcomes

    def append_verified(
        self,
        step: VerifyStep,
        logits: DeviceLogits,
        fail: Callable[[EngineSequence, str], None],
        release: Callable[[EngineSequence], None],
    ) -> list[EngineSequence]:
        """Append each drafted row's accepted drafts and next token (stop rules on every
        one; what follows a stop is dropped), then roll its KV back to what it keeps. A row
        that fails ends through `fail` (its request alone); a finished one is `release`d.
        The drafted sequences, in order."""
        now = time.perf_counter()
        touched: list[EngineSequence] = []
        for row, verified, error in self.verify(step, logits):
            seq = row.seq
            touched.append(seq)
            if verified is None:
                fail(seq, error or "verification failed")
                continue
            appended = 0
            try:
                for token_id, logprobs in zip(verified.token_ids, verified.logprobs, strict=True):
                    seq.append_token(token_id, logprobs, now)
                    appended += 1
                    if seq.is_finished:
                        break
            except Exception as err:  # e.g. the detokenizer: this request alone fails
                fail(seq, f"output processing failed: {err}")
                continue
            self.commit(row, verified.num_accepted)
            self.metrics.add_tokens(prompt=0, generated=appended)
            if seq.is_finished:
                release(seq)
        return touched

    def forget(self, seq: EngineSequence) -> None:
        """`seq` ended: the draft model drops its KV sequence."""
        if self.draft is not None:
            self.draft.forget(seq)

    def commit(self, row: DraftedRow, num_accepted: int) -> None:
        """After the verified tokens were appended to `row.seq`: its KV keeps the last
        committed token and the accepted drafts (no more than the sequence now has, when a
        stop rule cut it short); what the forward computed for the rest is dropped. A
        recurrent state that took in a rejected draft goes back to its snapshot, and then
        the whole chunk is recomputed next step (module doc)."""
        seq = row.seq
        computed_before = seq.num_computed_tokens
        in_cache = computed_before + 1 + len(row.draft_token_ids)
        keep = min(computed_before + 1 + num_accepted, seq.num_tokens)
        if self.recurrent_pool is not None and keep < in_cache:
            assert seq.recurrent_slot is not None
            self.recurrent_pool.restore(seq.recurrent_slot)
            keep = computed_before
        self.block_manager.drop_last_tokens(seq, in_cache - keep)
        seq.num_computed_tokens = keep
        self.block_manager.cache_full_blocks(seq)


def _greedy_on_device(seq: EngineSequence) -> bool:
    """Whether every position of `seq` is its row's argmax (greedy, no logit changed)."""
    return seq.params.greedy and not needs_host_row(seq.sampling)


def _verify_batch(
    plain: list[ScheduledSequence], drafts: list[tuple[EngineSequence, DraftProposal]]
) -> tuple[ForwardBatch, list[DraftedRow]]:
    """The ragged forward of `plain` followed by one chunk per drafted sequence (its last
    token and drafts, a logits row at each). Images `plain` prefills stay in it; a
    sequence after its images verifies at index + rope delta (M-RoPE), as it decodes."""
    base = ragged_batch(plain) if plain else ForwardBatch([], [], [], [], [], [], [])
    kv_ids, token_ids = list(base.kv_ids), list(base.token_ids)
    lengths, positions = list(base.chunk_lengths), list(base.logit_positions or [])
    drafted: list[DraftedRow] = []
    for seq, (draft_token_ids, draft_probs) in drafts:
        assert seq.kv_id is not None
        chunk = [seq.token_ids[-1], *draft_token_ids]
        drafted.append(DraftedRow(seq, draft_token_ids, draft_probs, len(positions)))
        positions.extend(range(len(token_ids), len(token_ids) + len(chunk)))
        kv_ids.append(seq.kv_id)
        token_ids.extend(chunk)
        lengths.append(len(chunk))
    chunks = [Chunk(seq, seq.num_tokens - 1, 1 + len(draft_ids)) for seq, (draft_ids, _) in drafts]
    drafted_slots = recurrent_slots([seq for seq, _ in drafts])
    slots = None if drafted_slots is None else [*(base.recurrent_slots or []), *drafted_slots]
    batch = ForwardBatch(
        kv_ids,
        token_ids,
        lengths,
        positions,
        base.sampling_seqs,
        base.sampling_rows,
        base.prompt_logprob_rows,
        slots,
        base.images,
        chunk_rope_positions([*ragged_chunks(plain), *chunks]),
    )
    return batch, drafted
