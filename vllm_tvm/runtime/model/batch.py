"""One step's scheduled work as the arguments of ONE forward, and that forward.

Why it exists: the scheduler hands out sequences with a number of tokens each (a whole
prompt, a chunk of one, or the single token sampled last step); the runner takes KV ids and
token ids. In between: which compiled function runs, which tokens each sequence feeds, which
rows of logits are produced, and which row each sequence samples from (prompt logprobs need
a row per prompt position). As in vLLM v1, a step is one forward whatever it mixes:

- every sequence computes exactly its last sampled token (a *decode row*): the compiled
  `decode` (or `decode_single` at batch 1), whose static shapes CUDA graphs capture; one
  logits row per sequence;
- anything else: one ragged `prefill` over all chunks, a decode row being a 1-token chunk;
  `logit_positions` selects the rows that are needed (the last token of each chunk that
  finishes its sequence's tokens, every position of a chunk that wants prompt logprobs).

A sequence whose images carry M-RoPE positions (Qwen2.5-VL) is never a decode row: its
positions are not the cache's, so every forward holding it is the ragged one, which takes
every row's positions (`ForwardBatch.rope_positions`).

Chunks are laid out prefills first, then decode rows, so that sequences sample in the same
order whichever forward runs (the order of the shared random generator's draws).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from vllm_tvm.runtime.requests.prompt_images import ForwardImages, PromptImages
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits

if TYPE_CHECKING:
    from vllm_tvm.runtime.requests.sequence import EngineSequence, ScheduledSequence


class ForwardRunner(Protocol):
    """The two forwards of a runner (runner_interface.py) a batch runs on."""

    def prefill_logits(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
        recurrent_slots: Sequence[int] | None = None,
        images: ForwardImages | None = None,
        rope_positions: np.ndarray | None = None,
    ) -> DeviceLogits:
        """One ragged forward over `chunks`; the logits rows at `logit_positions`
        (`recurrent_slots`: each sequence's recurrent-state slot, for a hybrid model;
        `images`: soft-token rows whose embeddings are replaced, for a vision model;
        `rope_positions` [3, tokens]: every row's M-RoPE positions, for a model with them)."""
        ...

    def encode_images(
        self, pixel_values: np.ndarray, layout: Sequence[np.ndarray] = ()
    ) -> np.ndarray:
        """Soft-token embeddings of preprocessed images: [images, tokens, hidden] of pixel
        values [images, 3, H, W], or [tokens of all images, hidden] of merge-unit patches
        and their `layout` (PromptImages.encoder_layout)."""
        ...

    def decode_logits(
        self,
        seq_ids: Sequence[int],
        token_ids: Sequence[int],
        recurrent_slots: Sequence[int] | None = None,
    ) -> DeviceLogits:
        """One token per sequence; a logits row per sequence."""
        ...


class Chunk(NamedTuple):
    """Tokens [start, start + count) of `seq` in one forward."""

    seq: EngineSequence
    start: int
    count: int


class PromptLogprobRows(NamedTuple):
    """The logits rows `[first_row, end_row)` of `seq`'s chunk, which starts at prompt
    position `start`: each row scores the prompt token after its position."""

    seq: EngineSequence
    start: int
    first_row: int
    end_row: int


@dataclass(frozen=True)
class ForwardBatch:
    """The arguments of one forward and what its logits rows mean.

    `token_ids` are the chunks of all sequences one after another, `chunk_lengths[i]` tokens
    for KV sequence `kv_ids[i]`. `logit_positions` (indices into `token_ids`) None means the
    decode forward (one token and one logits row per sequence). After the forward,
    `sampling_seqs[j]` draws its next token from row `sampling_rows[j]`.
    `recurrent_slots[i]` is the recurrent-state slot of `kv_ids[i]` (None: the model keeps
    no recurrent state).
    """

    kv_ids: list[int]
    token_ids: list[int]
    chunk_lengths: list[int]
    logit_positions: list[int] | None
    sampling_seqs: list[EngineSequence]
    sampling_rows: list[int]
    prompt_logprob_rows: list[PromptLogprobRows]
    recurrent_slots: list[int] | None = None
    images: list[tuple[int, PromptImages]] = field(default_factory=list)
    """(row of the chunk's first token, the prompt's images) of each chunk that prefills
    images: always from the prompt's start through its last image."""
    rope_positions: np.ndarray | None = None
    """[3, tokens] int32: every row's M-RoPE positions when some sequence of the batch has
    them (its images'); None: the forward rotates at the cache's positions."""

    @property
    def is_decode(self) -> bool:
        """Whether the batch runs the decode forward."""
        return self.logit_positions is None


def has_rope_positions(seq: EngineSequence) -> bool:
    """Whether `seq`'s tokens rotate at M-RoPE positions of its images' (never the cache's
    own: such a sequence always runs in the ragged forward, which takes positions)."""
    return seq.images is not None and seq.images.rope_positions is not None


def is_decode_row(item: ScheduledSequence) -> bool:
    """One token, the last one sampled, after tokens already in the cache: a decode row."""
    seq = item.seq
    return (
        item.num_tokens == 1
        and 0 < seq.num_computed_tokens == len(seq.token_ids) - 1
        and (seq.prompt_logprobs is None or not seq.wants_prompt_logprobs)
    )


def prepare_batch(scheduled: Sequence[ScheduledSequence]) -> ForwardBatch:
    """The forward that computes `scheduled` (the sequences' tokens are not yet marked
    computed: the caller does that once the forward has run)."""
    prefills, decodes = _split_decode_rows(scheduled)
    if not prefills and not any(has_rope_positions(seq) for seq in decodes):
        return ForwardBatch(
            kv_ids=[seq.kv_id for seq in decodes],  # type: ignore[misc]  # scheduled sequences hold KV
            token_ids=[seq.token_ids[-1] for seq in decodes],
            chunk_lengths=[1] * len(decodes),
            logit_positions=None,
            sampling_seqs=decodes,
            sampling_rows=list(range(len(decodes))),
            prompt_logprob_rows=[],
            recurrent_slots=recurrent_slots(decodes),
        )
    return _ragged_batch(prefills, decodes)


def recurrent_slots(seqs: Sequence[EngineSequence]) -> list[int] | None:
    """The recurrent-state slots of `seqs` in order; None when they hold none (a model
    without recurrent state: the block manager gives every running sequence a slot or none)."""
    slots = [seq.recurrent_slot for seq in seqs]
    if None in slots:
        assert all(slot is None for slot in slots), "some sequences hold no recurrent slot"
        return None
    return slots  # type: ignore[return-value]  # no None in it


def ragged_batch(scheduled: Sequence[ScheduledSequence]) -> ForwardBatch:
    """`prepare_batch`'s ragged forward of `scheduled` even when it holds decode rows only
    (for a caller that appends chunks of its own: runtime/speculative/)."""
    return _ragged_batch(*_split_decode_rows(scheduled))


def ragged_chunks(scheduled: Sequence[ScheduledSequence]) -> list[Chunk]:
    """The chunks of `ragged_batch(scheduled)`, in its order."""
    return _chunks(*_split_decode_rows(scheduled))


def _split_decode_rows(
    scheduled: Sequence[ScheduledSequence],
) -> tuple[list[ScheduledSequence], list[EngineSequence]]:
    """(the items that are not decode rows, the sequences of those that are)."""
    prefills = [item for item in scheduled if not is_decode_row(item)]
    return prefills, [item.seq for item in scheduled if is_decode_row(item)]


def _chunks(prefills: list[ScheduledSequence], decodes: list[EngineSequence]) -> list[Chunk]:
    """The prefill chunks, then the decode rows as 1-token chunks (`_ragged_batch`'s order)."""
    chunks = [Chunk(item.seq, item.seq.num_computed_tokens, item.num_tokens) for item in prefills]
    return chunks + [Chunk(seq, len(seq.token_ids) - 1, 1) for seq in decodes]


def _ragged_batch(prefills: list[ScheduledSequence], decodes: list[EngineSequence]) -> ForwardBatch:
    """One ragged prefill: the prefill chunks, then the decode rows as 1-token chunks."""
    kv_ids: list[int] = []
    token_ids: list[int] = []
    lengths: list[int] = []
    positions: list[int] = []
    sampling_seqs: list[EngineSequence] = []
    sampling_rows: list[int] = []
    logprob_rows: list[PromptLogprobRows] = []
    offset = 0
    images: list[tuple[int, PromptImages]] = []
    for item in prefills:
        seq, start, count = item.seq, item.seq.num_computed_tokens, item.num_tokens
        assert seq.kv_id is not None
        if seq.images is not None and start < seq.images.prefill_floor:
            # The scheduler admits an image prompt only with a first chunk this long.
            assert start == 0 and count >= seq.images.prefill_floor, "an image block was split"
            images.append((offset, seq.images))
        kv_ids.append(seq.kv_id)
        token_ids.extend(seq.token_ids[start : start + count])
        lengths.append(count)
        first_row = len(positions)
        if seq.wants_prompt_logprobs:
            positions.extend(range(offset, offset + count))
            logprob_rows.append(PromptLogprobRows(seq, start, first_row, len(positions)))
        elif start + count == seq.num_tokens:
            positions.append(offset + count - 1)
        if start + count == seq.num_tokens:
            sampling_seqs.append(seq)
            sampling_rows.append(len(positions) - 1)
        offset += count
    for seq in decodes:
        assert seq.kv_id is not None
        kv_ids.append(seq.kv_id)
        token_ids.append(seq.token_ids[-1])
        lengths.append(1)
        positions.append(offset)
        sampling_seqs.append(seq)
        sampling_rows.append(len(positions) - 1)
        offset += 1
    if not positions:  # no chunk finishes its tokens: no logits are needed, one is made
        positions.append(offset - 1)
    slots = recurrent_slots([*(item.seq for item in prefills), *decodes])
    return ForwardBatch(
        kv_ids,
        token_ids,
        lengths,
        positions,
        sampling_seqs,
        sampling_rows,
        logprob_rows,
        slots,
        images,
        chunk_rope_positions(_chunks(prefills, decodes)),
    )


def chunk_rope_positions(chunks: Sequence[Chunk]) -> np.ndarray | None:
    """[3, tokens] M-RoPE positions of `chunks` when one of them has positions of its own
    (later tokens at index + rope delta); a sequence without any at its indices in all
    three."""
    if not any(has_rope_positions(seq) for seq, _, _ in chunks):
        return None
    parts = [
        seq.images.positions(start, count)  # type: ignore[union-attr]
        if has_rope_positions(seq)
        else np.broadcast_to(np.arange(start, start + count, dtype=np.int32), (3, count))
        for seq, start, count in chunks
    ]
    return np.concatenate(parts, axis=1).astype(np.int32)


def run_forward(runner: ForwardRunner, batch: ForwardBatch) -> DeviceLogits:
    """Run `batch` as one forward on `runner`; its logits rows, on the device (the slots go
    only to a runner of a model with recurrent state, so no other runner takes them)."""
    slots: dict[str, Any] = (
        {} if batch.recurrent_slots is None else {"recurrent_slots": batch.recurrent_slots}
    )
    if batch.images:
        slots["images"] = forward_images(runner, batch.images)
    if batch.rope_positions is not None:
        slots["rope_positions"] = batch.rope_positions
    if batch.logit_positions is None:
        return runner.decode_logits(batch.kv_ids, batch.token_ids, **slots)
    ends = list(itertools.accumulate(batch.chunk_lengths))
    chunks = [
        batch.token_ids[end - length : end]
        for end, length in zip(ends, batch.chunk_lengths, strict=True)
    ]
    return runner.prefill_logits(batch.kv_ids, chunks, batch.logit_positions, **slots)


def forward_images(
    runner: ForwardRunner, chunks: Sequence[tuple[int, PromptImages]]
) -> ForwardImages:
    """The soft-token rows of a forward's image chunks, each image encoded the first time
    one of its request's sequences prefills it (the request's sequences share it)."""
    rows: list[np.ndarray] = []
    embeddings: list[np.ndarray] = []
    groups: list[np.ndarray] = []
    for offset, images in chunks:
        if images.embeddings is None:
            encoded = runner.encode_images(images.pixel_values, images.encoder_layout)
            if encoded.ndim == 2:  # all images' tokens in one sequence
                encoded = np.split(encoded, np.cumsum(images.lengths)[:-1])
            images.embeddings = list(encoded)
        for start, length, image_embeddings in zip(
            images.starts, images.lengths, images.embeddings, strict=True
        ):
            span = np.arange(offset + start, offset + start + length)
            rows.append(span)
            embeddings.append(image_embeddings)
            groups.append(np.full(len(span), len(groups)))
    return ForwardImages(np.concatenate(rows), np.concatenate(embeddings), np.concatenate(groups))
