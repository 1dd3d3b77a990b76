"""When does a request stop, and which of its text may be streamed yet? vLLM's rules, per
request, from plain sampling values (no SamplingParams import, so any caller can use it).

The rules, in the order vLLM's scheduler and detokenizer apply them to each new token:
- before `min_tokens` output tokens nothing stops the request except the context window
  (EOS, stop ids and stop strings are all ignored; the sampler should also mask those ids:
  `suppressed_token_ids()`);
- EOS ids (unless `ignore_eos`) and `stop_token_ids` finish with "stop"; that token's text is
  left out unless `include_stop_str_in_output`. The primary EOS (the first of
  `eos_token_ids`) reports `stop_reason` None; extra EOS ids (from generation_config) behave
  as stop ids, as in vLLM, and report the id;
- `max_tokens` output tokens, or the context window (`max_model_len` tokens including the
  prompt), finish with "length";
- a stop string finishes with "stop" and `stop_reason` = the string, even on the token that
  hit the length cap. The output is cut before the string (or after it with
  `include_stop_str_in_output`). The search covers strings that end in the new text, so a
  string split across tokens is found; of several, the one that completes first wins.

Streaming never shows text that is later cut: while unfinished, the longest tail of the text
that could still grow into a stop string is held back. When the request finishes, the
decoder is flushed and all remaining text is released.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

FINISH_STOP = "stop"
FINISH_LENGTH = "length"


class TextDecoder(Protocol):
    """What the checker needs from a detokenizer (IncrementalDetokenizer fits)."""

    def add(self, token_id: int) -> str:
        """Append one id; return the newly stable text."""
        ...

    def flush(self) -> str:
        """No more ids: return all text still held back."""
        ...


@dataclass(frozen=True)
class StepResult:
    """The outcome of one token: text to stream now and, once finished, why."""

    text: str
    finished: bool
    finish_reason: str | None = None
    stop_reason: int | str | None = None


_NO_TEXT_YET = StepResult(text="", finished=False)
"""The result of most tokens without text (shared: results are immutable)."""


def _normalize_stop(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    strings = (stop,) if isinstance(stop, str) else tuple(stop or ())
    for s in strings:
        if not isinstance(s, str) or not s:
            raise ValueError(f"invalid stop string {s!r}; stop strings must be non-empty str")
    return strings


def _check_ids(name: str, ids: Sequence[int]) -> list[int]:
    bad = [i for i in ids if not isinstance(i, int) or isinstance(i, bool) or i < 0]
    if bad:
        raise ValueError(f"{name} must be non-negative ints, got {bad!r} in {list(ids)!r}")
    return list(ids)


class StopChecker:
    """Per-request stop state: feed each sampled id with `step`, stream `StepResult.text`."""

    def __init__(
        self,
        *,
        prompt_len: int,
        max_model_len: int,
        max_tokens: int | None = None,
        min_tokens: int = 0,
        stop: str | Sequence[str] | None = None,
        stop_token_ids: Sequence[int] | None = None,
        eos_token_ids: Sequence[int] = (),
        ignore_eos: bool = False,
        include_stop_str_in_output: bool = False,
    ) -> None:
        """`max_tokens` None or <= 0 means "up to the context window"; `eos_token_ids` lists
        the primary EOS first (see the module docstring for how each one reports)."""
        if prompt_len < 0:
            raise ValueError(f"prompt_len must be >= 0, got {prompt_len}")
        if max_model_len <= prompt_len:
            raise ValueError(
                f"a prompt of {prompt_len} tokens leaves no room to generate within "
                f"max_model_len={max_model_len}; the prompt must be shorter than max_model_len"
            )
        if min_tokens < 0:
            raise ValueError(f"min_tokens must be >= 0, got {min_tokens}")
        limit = max_model_len - prompt_len
        if max_tokens is not None and max_tokens > 0:
            if min_tokens > max_tokens:
                raise ValueError(f"min_tokens={min_tokens} must be <= max_tokens={max_tokens}")
            limit = min(limit, max_tokens)
        self._max_output_tokens = limit
        self._min_tokens = min_tokens
        self._stop = _normalize_stop(stop)
        self._include_stop = include_stop_str_in_output
        # Token id -> stop_reason. Stop ids first so that an id listed both ways reports
        # like vLLM, where the primary EOS check runs before the stop-id check.
        stop_ids = _check_ids("stop_token_ids", stop_token_ids or ())
        eos_ids = _check_ids("eos_token_ids", eos_token_ids)
        self._stop_ids: dict[int, int | None] = {i: i for i in stop_ids}
        if not ignore_eos:
            for position, eos in enumerate(eos_ids):
                self._stop_ids[eos] = None if position == 0 else self._stop_ids.get(eos, eos)
        # vLLM masks every EOS id before min_tokens, even under ignore_eos.
        self._min_tokens_masked = frozenset(stop_ids) | frozenset(eos_ids)
        self._hold_stop_prefixes = bool(self._stop) and not include_stop_str_in_output
        self._num_output_tokens = 0
        self._text = ""
        self._emitted = 0
        self._checked_upto = 0
        self._result: StepResult | None = None
        # (finish_reason, stop_reason) the id `count` took decides, until `render` runs.
        self._counted: tuple[str | None, int | str | None] | None = None

    @property
    def max_output_tokens(self) -> int:
        """How many tokens the request may generate at most."""
        return self._max_output_tokens

    @property
    def output_text(self) -> str:
        """The output text so far (cut at the stop string once finished by one)."""
        return self._text

    @property
    def finished(self) -> bool:
        """Whether the request has stopped."""
        return self._result is not None

    def suppressed_token_ids(self) -> frozenset[int]:
        """Ids the sampler must forbid for the next token: the stop ids and all EOS ids
        while fewer than `min_tokens` tokens exist (as vLLM's min-tokens logits processor
        does, `ignore_eos` or not)."""
        if self._num_output_tokens >= self._min_tokens:
            return frozenset()
        return self._min_tokens_masked

    def step(self, token_id: int, decoder: TextDecoder) -> StepResult:
        """Account for one sampled id (`decoder` has not seen it yet; the checker feeds it):
        `count` then `render`."""
        self.count(token_id)
        return self.render(token_id, decoder)

    def count(self, token_id: int) -> bool:
        """The first half of `step`, without the text: count the id (what `min_tokens` and
        `suppressed_token_ids` read) and apply the stops the id decides alone (a stop or
        EOS id, the length limit). True when the id ends the request. `render` must follow
        before the next `count`; an engine that overlaps the next forward with output work
        calls it later, so the next step is scheduled and sampled from an exact count."""
        if self._result is not None:
            raise RuntimeError(
                f"request already finished ({self._result.finish_reason}); no more tokens"
            )
        if self._counted is not None:
            raise RuntimeError("count() called twice without render() in between")
        self._num_output_tokens += 1
        n = self._num_output_tokens
        if n >= self._min_tokens and token_id in self._stop_ids:
            self._counted = (FINISH_STOP, self._stop_ids[token_id])
        elif n >= self._max_output_tokens:
            self._counted = (FINISH_LENGTH, None)
        else:
            self._counted = (None, None)
        return self._counted[0] is not None

    def render(self, token_id: int, decoder: TextDecoder) -> StepResult:
        """The second half of `step` for the id `count` took: its text, the stop strings,
        and what may be streamed."""
        if self._counted is None:
            raise RuntimeError("render() without a counted token")
        (finish_reason, stop_reason), self._counted = self._counted, None
        stopped_by_token = finish_reason == FINISH_STOP
        delta = "" if stopped_by_token and not self._include_stop else decoder.add(token_id)
        if finish_reason is None:
            if not delta:  # no new text: nothing to search, nothing newly visible
                return _NO_TEXT_YET
        else:
            delta += decoder.flush()
        self._text += delta

        if self._num_output_tokens > self._min_tokens and self._stop and not stopped_by_token:
            matched = self._find_stop_string()
            if matched is not None:
                finish_reason, stop_reason = FINISH_STOP, matched
        self._checked_upto = len(self._text)

        if finish_reason is None:
            visible = len(self._text) - self._held_back()
            text = self._text[self._emitted : visible]
            self._emitted = visible
            return StepResult(text=text, finished=False) if text else _NO_TEXT_YET
        text = self._text[self._emitted :]
        self._emitted = len(self._text)
        self._result = StepResult(text, True, finish_reason, stop_reason)
        return self._result

    def _find_stop_string(self) -> str | None:
        """The stop string that completes first in the unchecked text; cuts the text."""
        best: tuple[int, int, str] | None = None  # (end, start, string)
        for s in self._stop:
            start = self._text.find(s, max(0, self._checked_upto - len(s) + 1))
            if start != -1 and (best is None or start + len(s) < best[0]):
                best = (start + len(s), start, s)
        if best is None:
            return None
        end, start, s = best
        self._text = self._text[: end if self._include_stop else start]
        return s

    def _held_back(self) -> int:
        """Length of the longest text tail that is a proper prefix of a stop string."""
        if not self._hold_stop_prefixes:
            return 0
        longest = max(len(s) for s in self._stop) - 1
        for size in range(min(longest, len(self._text)), 0, -1):
            tail = self._text[-size:]
            if any(len(s) > size and s.startswith(tail) for s in self._stop):
                return size
        return 0
