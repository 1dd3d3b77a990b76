"""A sequence whose draft is wholly rejected pauses drafting for 4, 8, 16, ... steps (at
most MAX_PAUSE_STEPS) and then drafts one-token probes; an accepted token ends the backoff;
sequences back off independently."""

from __future__ import annotations

from vllm_tvm.runtime.speculative.backoff import (
    FIRST_PAUSE_STEPS,
    MAX_PAUSE_STEPS,
    PROBE_TOKENS,
    DraftBackoff,
)


class Seq:
    """Stands for an EngineSequence (the backoff only keys on identity)."""


def _paused_steps(backoff: DraftBackoff, seq: Seq) -> int:
    steps = 0
    while backoff.pauses(seq):  # type: ignore[arg-type]
        steps += 1
    return steps


def test_pauses_double_after_each_wholly_rejected_draft_up_to_the_cap() -> None:
    backoff, seq = DraftBackoff(), Seq()
    assert _paused_steps(backoff, seq) == 0
    pauses = []
    for _ in range(8):
        backoff.record(seq, 0)  # type: ignore[arg-type]
        pauses.append(_paused_steps(backoff, seq))
    assert (FIRST_PAUSE_STEPS, MAX_PAUSE_STEPS) == (4, 64)
    assert pauses == [4, 8, 16, 32, 64, 64, 64, 64]


def test_an_accepted_token_ends_the_backoff_and_sequences_are_independent() -> None:
    backoff, seq, other = DraftBackoff(), Seq(), Seq()
    for _ in range(3):
        backoff.record(seq, 0)  # type: ignore[arg-type]
    backoff.record(seq, 2)  # type: ignore[arg-type]
    assert _paused_steps(backoff, seq) == 0
    backoff.record(seq, 0)  # type: ignore[arg-type]
    assert not backoff.pauses(other)  # type: ignore[arg-type]
    assert _paused_steps(backoff, seq) == FIRST_PAUSE_STEPS


def test_a_sequence_that_backs_off_drafts_probes_until_one_is_accepted() -> None:
    backoff, seq, other = DraftBackoff(), Seq(), Seq()
    assert backoff.limit(seq, 4) == 4  # type: ignore[arg-type]
    backoff.record(seq, 0)  # type: ignore[arg-type]
    _paused_steps(backoff, seq)
    assert PROBE_TOKENS == 1
    assert backoff.limit(seq, 4) == PROBE_TOKENS  # type: ignore[arg-type]
    assert backoff.limit(other, 4) == 4  # type: ignore[arg-type]
    backoff.record(seq, 0)  # type: ignore[arg-type]  # a rejected probe: a longer pause
    assert _paused_steps(backoff, seq) == 2 * FIRST_PAUSE_STEPS
    assert backoff.limit(seq, 4) == PROBE_TOKENS  # type: ignore[arg-type]
    backoff.record(seq, 1)  # type: ignore[arg-type]  # an accepted probe: whole drafts again
    assert backoff.limit(seq, 4) == 4  # type: ignore[arg-type]
