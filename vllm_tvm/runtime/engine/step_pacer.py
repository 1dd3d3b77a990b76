"""How many prompt tokens a step may carry while streams decode, from measured step times.

Why it exists: the token budget bounds how many tokens a step computes, not how long it
takes. On a slow device a long prompt's chunk makes one step last seconds, and every
running stream waits that long for its next token. The pacer keeps those gaps near a
target inter-token latency: it learns, from the steps the engine times, what the decode
rows of a step cost and what each prompt token adds, and gives a step that carries decode
rows only as many prompt tokens as fit in the target. When the decode rows alone take most
of the target (a slow or loaded device, a large batch), the prompt tokens may still take as
long as the decode rows do, and never fewer than a floor (an eighth of the step's token
budget, see `paced_prompt_floor`): on a device where a prompt token costs what a decode row
costs, a smaller share would admit new requests too slowly for the batch to grow. A
stream's gap is then about max(target, twice a decode step, a decode step plus the floor's
prompt tokens), where the token budget alone allowed a step of the whole budget.

Steps without decode rows are not paced: no stream waits between tokens on them. Pacing
changes only where a prompt is cut into chunks, which chunked prefill already keeps out of
the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

FLOOR_SHARE_OF_BUDGET = 8
"""A paced step may always carry 1/FLOOR_SHARE_OF_BUDGET of the token budget in prompts."""


def paced_prompt_floor(max_num_batched_tokens: int) -> int:
    """The fewest prompt tokens a paced step may carry under this token budget."""
    return max(max_num_batched_tokens // FLOOR_SHARE_OF_BUDGET, 1)


SMOOTHING = 0.3
"""Weight of the newest measurement in the running estimates (exponential average)."""


class ScheduledWork(Protocol):
    """What the pacer reads of a scheduled item: how many tokens it computes."""

    @property
    def num_tokens(self) -> int: ...


class StepPacer:
    """Running estimates of a step's cost and the prompt-token allowance they give."""

    def __init__(self, target_seconds: float, min_prompt_tokens: int) -> None:
        if target_seconds <= 0:
            raise ValueError(f"the step time target must be positive, got {target_seconds}")
        self.target_seconds = target_seconds
        self.min_prompt_tokens = min_prompt_tokens
        self.seconds_per_decode_row: float | None = None
        self._prompt_seconds: float | None = None  # averages of prompt chunks' time ...
        self._prompt_tokens: float | None = None  # ... and size: their ratio weighs big chunks

    @property
    def seconds_per_prompt_token(self) -> float | None:
        """What one prompt token adds to a step, as measured so far (None: nothing yet)."""
        if self._prompt_seconds is None or self._prompt_tokens is None:
            return None
        return self._prompt_seconds / self._prompt_tokens

    def prompt_token_allowance(self, num_decode_rows: int) -> int | None:
        """Prompt tokens a step with `num_decode_rows` decode rows may carry; None while
        no prompt token has been measured to cost anything (no limit)."""
        per_token = self.seconds_per_prompt_token
        if not per_token:
            return None
        decode_seconds = num_decode_rows * (self.seconds_per_decode_row or 0.0)
        prompt_seconds = max(self.target_seconds - decode_seconds, decode_seconds)
        return max(int(prompt_seconds / per_token), self.min_prompt_tokens)

    def record(self, scheduled: Sequence[ScheduledWork], seconds: float) -> None:
        """Learn from one step: `scheduled` items (one token: a decode row; more: a prompt
        chunk) took `seconds`."""
        decode_rows = prompt_tokens = 0
        for item in scheduled:
            if item.num_tokens == 1:
                decode_rows += 1
            else:
                prompt_tokens += item.num_tokens
        if prompt_tokens == 0:
            if decode_rows:
                self.seconds_per_decode_row = _smoothed(
                    self.seconds_per_decode_row, seconds / decode_rows
                )
            return
        decode_seconds = decode_rows * (self.seconds_per_decode_row or 0.0)
        self._prompt_seconds = _smoothed(self._prompt_seconds, max(seconds - decode_seconds, 0.0))
        self._prompt_tokens = _smoothed(self._prompt_tokens, prompt_tokens)


def _smoothed(previous: float | None, newest: float) -> float:
    if previous is None:
        return newest
    return previous + SMOOTHING * (newest - previous)
