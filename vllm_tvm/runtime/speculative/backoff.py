"""When a sequence should stop drafting for a while: after a draft of which nothing was
accepted.

Why it exists: verifying k drafts costs more than one decode step (on the CPU, each extra
position of the ragged forward costs about half a decode step), so drafts that keep being
rejected slow the sequence down. Text that the proposer cannot predict tends to stay that
way for a stretch, and text being copied keeps being copied, so a sequence whose draft is
wholly rejected pauses drafting for FIRST_PAUSE_STEPS steps, then twice as long after each
further wholly rejected draft, up to MAX_PAUSE_STEPS; any accepted draft token ends the
backoff. Drafts that never match are then verified at decode steps 0, 5, 14, 31, 64, ...
instead of at every step (measured: benchmarks/speculative_ngram.py, `reject`). And while a
sequence backs off, its drafts after a pause are probes of PROBE_TOKENS token: a probe costs
a fraction of a k-token verify when rejected again (on the CPU a 2-token verify chunk costs
about 1.8 decode steps, a 5-token one about 3.1), and an accepted probe ends the backoff, so
the next draft is whole again. Greedy outputs do not depend on it (a paused row decodes its
next token plainly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from vllm_tvm.runtime.requests.sequence import EngineSequence

FIRST_PAUSE_STEPS = 4
"""The pause, in the sequence's decode steps, after a first wholly rejected draft."""

MAX_PAUSE_STEPS = 64
"""The longest pause, after repeated wholly rejected drafts."""

PROBE_TOKENS = 1
"""The longest draft of a sequence that backs off (until one of its drafts is accepted)."""


class DraftBackoff:
    """Per sequence (forgotten with the sequence): steps left to pause, and the next pause."""

    def __init__(self) -> None:
        self._paused: WeakKeyDictionary[EngineSequence, list[int]] = WeakKeyDictionary()

    def pauses(self, seq: EngineSequence) -> bool:
        """Whether `seq` skips drafting this step (counting the step off its pause)."""
        state = self._paused.get(seq)
        if state is None or state[0] == 0:
            return False
        state[0] -= 1
        return True

    def limit(self, seq: EngineSequence, room: int) -> int:
        """How many of `room` drafts `seq` may take: PROBE_TOKENS while it backs off."""
        return min(room, PROBE_TOKENS) if seq in self._paused else room

    def record(self, seq: EngineSequence, num_accepted: int) -> None:
        """A draft of `seq` was verified with `num_accepted` tokens accepted."""
        if num_accepted:
            self._paused.pop(seq, None)
            return
        state = self._paused.setdefault(seq, [0, FIRST_PAUSE_STEPS])
        state[0], state[1] = state[1], min(2 * state[1], MAX_PAUSE_STEPS)
