"""The contract every tool-call dialect follows, and the one engine that runs them.

A dialect is written once, as an incremental reader (``DialectReader``) over a text that only
grows. Streaming feeds it the generated text delta by delta; the non-streaming ``extract``
feeds it the whole text at once. Because both paths run the same reader, a stream split
anywhere reconstructs exactly what ``extract`` returns (for text whose calls are readable),
which is what OpenAI clients that mix the two modes expect.

What a reader reports is a list of events: content text, the start of a call (its name), and
fragments of the call's arguments JSON. ``ToolCallStreamer`` turns them into OpenAI chat
completion deltas (``{"content": ...}`` and ``{"tool_calls": [...]}``) and gives each call its
id. A reader that meets text it cannot read raises ``MalformedToolCall``: ``extract`` then
returns the whole text as content with no calls; a stream that has not announced a call yet
sends the text it had not accounted for, and all that follows, as content, and one that has
drops the rest (a sent call cannot be taken back, and content never follows calls).

The conventions shared by every dialect: content is the text before the first call, without
the whitespace that separates it from the call (and ``None`` when empty); text after the calls
that is not itself a call is dropped, as vLLM drops it; arguments are the JSON text of an
object.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_tvm.server.tool_parsers.scanning import (
    Incomplete,
    find_first,
    partial_marker_length,
    skip_whitespace,
)

Tools = Sequence[Mapping[str, Any]]


class MalformedToolCall(Exception):
    """The text claimed to hold a tool call but does not hold a readable one."""


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: its id, the function name and the arguments as JSON object text."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The call as an OpenAI ``tool_calls`` entry of a chat completion message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ContentEvent:
    """Plain text for the message content."""

    text: str


@dataclass(frozen=True)
class CallStartEvent:
    """A new call begins; its name is known."""

    name: str


@dataclass(frozen=True)
class ArgumentsEvent:
    """The next piece of the current call's arguments JSON."""

    text: str


Event = ContentEvent | CallStartEvent | ArgumentsEvent


def make_tool_call_id() -> str:
    """A vLLM-style tool-call id: ``chatcmpl-tool-`` and 32 random hex digits."""
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def function_schema(tools: Tools | None, name: str) -> Mapping[str, Any] | None:
    """The function definition called ``name`` among OpenAI ``tools`` (wrapped in
    ``{"type": "function", "function": ...}`` or bare), or None."""
    for tool in tools or ():
        function = tool.get("function", tool)
        if isinstance(function, Mapping) and function.get("name") == name:
            return function
    return None


State = Callable[[str, bool], bool]


class DialectReader(ABC):
    """Incremental reader of one dialect over a growing text.

    Subclasses hold a current state: a method ``(text, final) -> bool`` that consumes what it
    can and returns True when it made progress. A state raises ``Incomplete`` when it needs
    more text (at ``final`` that means the text ended inside a call) and
    ``MalformedToolCall`` when the text cannot be a call; ``malformed`` is then set for good.
    ``committed`` is the index up to which text has been reported as events or knowingly
    dropped, ``_pos`` the index where reading continues.
    """

    def __init__(self, tools: Tools | None) -> None:
        self.tools = tools
        self.committed = 0
        self.malformed = False
        self._calls_started = 0
        self._pos = 0
        self._events: list[Event] = []
        self._state: State = self._initial_state()

    @abstractmethod
    def _initial_state(self) -> State:
        """The state reading starts in."""

    def advance(self, text: str, final: bool) -> list[Event]:
        """Read as far as ``text`` allows (all of it when ``final``); return the new events.

        Once the text turns out malformed, everything from ``committed`` on is content, unless
        a call was already announced: then the rest is dropped, since a stream cannot take
        the call back and content never follows calls.
        """
        if not self.malformed:
            try:
                while self._state(text, final):
                    pass
            except Incomplete:
                self.malformed = final
            except MalformedToolCall:
                self.malformed = True
        if self.malformed:
            if not self._calls_started:
                self._content(text[self.committed :])
            self.committed = len(text)
        events, self._events = self._events, []
        return events

    def _content(self, text: str) -> None:
        if text:
            self._events.append(ContentEvent(text))

    def _start_call(self, name: str) -> None:
        self._calls_started += 1
        self._events.append(CallStartEvent(name))

    def _arguments(self, text: str) -> None:
        if text:
            self._events.append(ArgumentsEvent(text))

    def _read_content(self, text: str, final: bool, markers: Sequence[str]) -> int | None:
        """Report content from ``committed`` up to the first of ``markers``.

        Returns the index of the marker, or None when there is none yet: then everything has
        been reported except a tail that could begin a marker and the whitespace before it
        (at ``final``, everything).
        """
        found = find_first(text, self.committed, markers)
        if found is not None:
            index = found[0]
            piece = text[self.committed : index].rstrip()
            self._content(piece)
            self.committed += len(piece)
            return index
        if final:
            self._content(text[self.committed :])
            self.committed = len(text)
            return None
        safe = len(text) - partial_marker_length(text, self.committed, markers)
        piece = text[self.committed : safe].rstrip()
        self._content(piece)
        self.committed += len(piece)
        return None

    def _content_until(self, text: str, final: bool, marker: str, then: State) -> bool:
        """A state's step: report content up to ``marker`` (see ``_read_content``), then read
        on in ``then`` just after it; False, no progress, while the marker has not come."""
        return self._continue_after(self._read_content(text, final, (marker,)), marker, then)

    def _skip_until(self, text: str, marker: str, then: State) -> bool:
        """A state's step: drop text up to ``marker`` (see ``_skip_to``), then read on in
        ``then`` just after it; False, no progress, while the marker has not come."""
        return self._continue_after(self._skip_to(text, (marker,)), marker, then)

    def _continue_after(self, index: int | None, marker: str, then: State) -> bool:
        """Read on in ``then`` after ``marker`` at ``index``; False when ``index`` is None."""
        if index is None:
            return False
        self._pos = index + len(marker)
        self._state = then
        return True

    def _drop_rest(self, text: str, final: bool) -> bool:
        """The state after the last call: whatever follows is dropped."""
        self._pos = self.committed = len(text)
        return False

    def _skip_to(self, text: str, markers: Sequence[str]) -> int | None:
        """Drop text from ``_pos`` up to the first of ``markers``; return its index, or None
        when there is none yet (only a tail that could begin a marker is kept)."""
        found = find_first(text, self._pos, markers)
        if found is None:
            self._pos = len(text) - partial_marker_length(text, self._pos, markers)
            self.committed = self._pos
            return None
        self.committed = found[0]
        return found[0]


class LeadingCallDialect(DialectReader):
    """A dialect whose calls may open the message with no marker before them (Llama 3 JSON,
    pythonic): reading starts at the message's first character that is not whitespace."""

    def _initial_state(self) -> State:
        return self._at_start

    def _at_start(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, 0)
        if pos < len(text):
            return self._message_opens(text, pos, final)
        if final:  # a message of whitespace alone is content
            self._content(text[self.committed :])
            self.committed = len(text)
        return False

    @abstractmethod
    def _message_opens(self, text: str, pos: int, final: bool) -> bool:
        """The first state's step once the message's first character that is not
        whitespace, at ``pos``, has arrived."""


class ToolCallStreamer:
    """Turns a generated text, fed delta by delta, into OpenAI chat-completion deltas.

    ``feed`` and ``finish`` return a list of delta dicts: ``{"content": str}`` while no call
    has started, then per call ``{"tool_calls": [{"index", "id", "type": "function",
    "function": {"name"}}]}`` followed by ``{"tool_calls": [{"index", "function":
    {"arguments": str}}]}`` fragments whose concatenation is the call's arguments JSON.
    """

    def __init__(self, reader: DialectReader, new_id: Callable[[], str]) -> None:
        self._reader = reader
        self._new_id = new_id
        self._text = ""
        self._index = -1

    def feed(self, delta: str) -> list[dict[str, Any]]:
        """Add generated text; return the deltas it makes known."""
        self._text += delta
        return self._to_deltas(self._reader.advance(self._text, final=False))

    def finish(self) -> list[dict[str, Any]]:
        """The generation ended; return the deltas for everything still held back."""
        return self._to_deltas(self._reader.advance(self._text, final=True))

    def _to_deltas(self, events: list[Event]) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, ContentEvent):
                if not event.text:
                    continue
                if deltas and "content" in deltas[-1]:
                    deltas[-1]["content"] += event.text
                else:
                    deltas.append({"content": event.text})
            elif isinstance(event, CallStartEvent):
                self._index += 1
                header = {
                    "index": self._index,
                    "id": self._new_id(),
                    "type": "function",
                    "function": {"name": event.name},
                }
                deltas.append({"tool_calls": [header]})
            else:
                last = (
                    deltas[-1]["tool_calls"][0] if deltas and "tool_calls" in deltas[-1] else None
                )
                if last is not None and "arguments" in last["function"]:
                    last["function"]["arguments"] += event.text
                else:
                    fragment = {"index": self._index, "function": {"arguments": event.text}}
                    deltas.append({"tool_calls": [fragment]})
        return deltas


class ToolParser:
    """A tool-call dialect under one name: ``extract`` for whole texts, ``streamer`` for
    streams.

    A dialect that needs nothing but its reader is ``ToolParser(name, reader_type)``;
    subclasses fix both as class attributes and override what differs (call ids).
    """

    name: str
    reader_type: type[DialectReader]

    def __init__(
        self, name: str | None = None, reader_type: type[DialectReader] | None = None
    ) -> None:
        if name is not None:
            self.name = name
        if reader_type is not None:
            self.reader_type = reader_type

    def reader(self, tools: Tools | None) -> DialectReader:
        """A fresh incremental reader (a ``reader_type``) for one generated text."""
        return self.reader_type(tools)

    def new_call_id(self) -> str:
        """A fresh id for one call, in the form the dialect's models are used to."""
        return make_tool_call_id()

    def extract(self, text: str, tools: Tools | None = None) -> tuple[str | None, list[ToolCall]]:
        """Split a finished generation into (content, tool calls).

        Content is None when empty. A text whose calls cannot be read comes back whole as
        content with no calls; this never raises on model output.
        """
        reader = self.reader(tools)
        events = reader.advance(text, final=True)
        if reader.malformed:
            return (text or None), []
        content: list[str] = []
        calls: list[tuple[str, list[str]]] = []
        for event in events:
            if isinstance(event, ContentEvent):
                content.append(event.text)
            elif isinstance(event, CallStartEvent):
                calls.append((event.name, []))
            else:
                calls[-1][1].append(event.text)
        tool_calls = [ToolCall(self.new_call_id(), name, "".join(args)) for name, args in calls]
        return ("".join(content) or None), tool_calls

    def streamer(self, tools: Tools | None = None) -> ToolCallStreamer:
        """A streaming state machine for one generation."""
        return ToolCallStreamer(self.reader(tools), self.new_call_id)
