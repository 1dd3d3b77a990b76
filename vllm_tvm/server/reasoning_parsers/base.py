"""Splitting a generation into reasoning and answer, for whole texts and for streams.

Reasoning models write their thinking between two tags (``<think>``/``</think>``,
``[THINK]``/``[/THINK]``) before the answer. The conventions differ in who writes the opening
tag: the model itself, or the chat template at the end of the prompt (then the output starts
inside the reasoning and only the closing tag appears). ``Opening`` names those conventions
and each parser picks one per request. One splitter, fed the text delta by delta or all at
once, serves both the streaming and the non-streaming path, so they always agree.

Whitespace around the tags is the template's, not the model's: reasoning is stripped and the
answer after the closing tag loses its leading whitespace. Text with no reasoning comes back
unchanged as content. While streaming, a tail that may be the start of a tag, and whitespace
that may turn out to precede one, is held back.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from vllm_tvm.server.tool_parsers.scanning import partial_marker_length, skip_whitespace

REASONING = "reasoning_content"
CONTENT = "content"


class Opening(enum.Enum):
    """Who opens the reasoning, as far as the parser can know before reading the output."""

    NO_REASONING = "no reasoning: thinking is disabled, everything is content"
    MODEL_OPENS = "reasoning only if the output starts with the opening tag"
    OPENED = "the prompt opened it: reasoning from the start (an opening tag is skipped)"
    UNDECIDED = "opening tag at the start, or reasoning up to a closing tag if one comes"


class TagSplitter:
    """Incremental splitter of one generation at ``open_tag`` / ``close_tag``.

    ``advance(text, final)`` reads the grown text and returns new (field, text) pieces, field
    being ``"reasoning_content"`` or ``"content"``. An ``answer_header`` right after the
    closing tag (the header of the message that holds the answer) is not content.
    """

    def __init__(
        self, open_tag: str, close_tag: str, opening: Opening, answer_header: str = ""
    ) -> None:
        self._open = open_tag
        self._close = close_tag
        self._answer_header = answer_header
        self._opening = opening
        self._pos = 0
        self._search_from = 0
        self._pieces: list[tuple[str, str]] = []
        self._state: Callable[[str, bool], bool] = (
            self._content if opening is Opening.NO_REASONING else self._start
        )

    def advance(self, text: str, final: bool) -> list[tuple[str, str]]:
        """Read as far as ``text`` allows (all of it when ``final``); return new pieces."""
        while self._state(text, final):
            pass
        pieces, self._pieces = self._pieces, []
        return pieces

    def _emit(self, field: str, text: str) -> None:
        if text:
            self._pieces.append((field, text))

    def _start(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, 0)
        head = text[pos : pos + len(self._open)]
        if head == self._open:
            self._pos = pos + len(self._open)
            self._state = self._reasoning_lead
            return True
        if self._open.startswith(head) and not final:
            return False
        if self._opening is Opening.OPENED:
            self._state = self._reasoning_lead
        elif self._opening is Opening.UNDECIDED:
            self._state = self._undecided
        else:
            self._state = self._content
        return True

    def _reasoning_lead(self, text: str, final: bool) -> bool:
        self._pos = skip_whitespace(text, self._pos)
        if self._pos >= len(text) and not final:
            return False
        self._state = self._reasoning
        return True

    def _reasoning(self, text: str, final: bool) -> bool:
        found = text.find(self._close, self._pos)
        if found >= 0:
            self._emit(REASONING, text[self._pos : found].rstrip())
            self._pos = found + len(self._close)
            self._state = self._content_lead
            return True
        end = (
            len(text)
            if final
            else len(text) - partial_marker_length(text, self._pos, (self._close,))
        )
        piece = text[self._pos : end].rstrip()
        self._emit(REASONING, piece)
        self._pos += len(piece)
        return False

    def _undecided(self, text: str, final: bool) -> bool:
        found = text.find(self._close, self._search_from)
        if found >= 0:
            self._emit(REASONING, text[:found].strip())
            self._pos = found + len(self._close)
            self._state = self._content_lead
            return True
        if final:
            self._state = self._content
            return True
        self._search_from = max(0, len(text) - len(self._close) + 1)
        return False

    def _content_lead(self, text: str, final: bool) -> bool:
        self._pos = skip_whitespace(text, self._pos)
        if self._pos >= len(text):
            return False
        header = self._answer_header
        head = text[self._pos : self._pos + len(header)]
        if header and head == header:
            self._pos += len(header)
        elif header and header.startswith(head) and not final:
            return False
        self._state = self._content
        return True

    def _content(self, text: str, final: bool) -> bool:
        self._emit(CONTENT, text[self._pos :])
        self._pos = len(text)
        return False


class Splitter(Protocol):
    """What both paths drive: ``advance(text, final)`` reads the grown text and returns new
    (field, text) pieces (``TagSplitter`` is the usual one)."""

    def advance(self, text: str, final: bool) -> list[tuple[str, str]]: ...


class ReasoningStreamer:
    """Turns a generation, fed delta by delta, into OpenAI deltas: ``{"reasoning_content":
    str}`` pieces, then ``{"content": str}`` pieces."""

    def __init__(self, splitter: Splitter) -> None:
        self._splitter = splitter
        self._text = ""

    def feed(self, delta: str) -> list[dict[str, Any]]:
        """Add generated text; return the deltas it makes known."""
        self._text += delta
        return _deltas(self._splitter.advance(self._text, final=False))

    def finish(self) -> list[dict[str, Any]]:
        """The generation ended; return the deltas for everything still held back."""
        return _deltas(self._splitter.advance(self._text, final=True))


def _deltas(pieces: list[tuple[str, str]]) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = []
    for field, text in pieces:
        if deltas and field in deltas[-1]:
            deltas[-1][field] += text
        else:
            deltas.append({field: text})
    return deltas


class ReasoningParser(ABC):
    """A reasoning convention: its tags and who opens them.

    ``prompt`` is the rendered prompt of the request (only ``think_auto`` looks at it) and
    ``enable_thinking`` the request's chat-template switch: False means no reasoning at all.
    """

    name: ClassVar[str]
    open_tag: ClassVar[str]
    close_tag: ClassVar[str]
    answer_header: ClassVar[str] = ""

    @abstractmethod
    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        """Who opens the reasoning for a request with this prompt and switch."""

    def extract(
        self, text: str, *, prompt: str | None = None, enable_thinking: bool | None = None
    ) -> tuple[str | None, str | None]:
        """Split a finished generation into (reasoning_content, content); None when empty."""
        splitter = self._splitter(prompt, enable_thinking)
        reasoning: list[str] = []
        content: list[str] = []
        for field, piece in splitter.advance(text, final=True):
            (reasoning if field == REASONING else content).append(piece)
        return ("".join(reasoning) or None), ("".join(content) or None)

    def streamer(
        self, *, prompt: str | None = None, enable_thinking: bool | None = None
    ) -> ReasoningStreamer:
        """A streaming splitter for one generation."""
        return ReasoningStreamer(self._splitter(prompt, enable_thinking))

    def _splitter(self, prompt: str | None, enable_thinking: bool | None) -> Splitter:
        return TagSplitter(
            self.open_tag,
            self.close_tag,
            self.opening(prompt, enable_thinking),
            self.answer_header,
        )
