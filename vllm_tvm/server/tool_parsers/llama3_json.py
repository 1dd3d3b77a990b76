"""Llama 3.x JSON tool calls: ``{"name": ..., "parameters": {...}}``.

Llama 3.1/3.2/3.3 answer a custom-tool request with the bare JSON object as the whole
message, sometimes after ``<|python_tag|>``; several calls are separated by ``;``. Since the
message is bare JSON, a reply that merely is JSON must stay content: an object counts as a
call only if it has exactly a string ``name`` and an object of ``parameters`` (or
``arguments``), and only text that starts with ``{`` or ``<|python_tag|>`` is read as calls.
"""

from __future__ import annotations

from vllm_tvm.server.tool_parsers.base import (
    DialectReader,
    MalformedToolCall,
    State,
    ToolParser,
    Tools,
)
from vllm_tvm.server.tool_parsers.json_call import JsonCallReader
from vllm_tvm.server.tool_parsers.scanning import Incomplete, match_literal, skip_whitespace

PYTHON_TAG = "<|python_tag|>"
SEPARATOR = ";"


class Llama3JsonReader(DialectReader):
    """A leading JSON call (or content up to ``<|python_tag|>``), then ``;``-separated calls;
    text after the last call is dropped."""

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._call: JsonCallReader | None = None

    def _initial_state(self) -> State:
        return self._at_start

    def _at_start(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, 0)
        if pos >= len(text):
            if final:
                self._state = self._in_content
                return True
            return False
        if text[pos] == "{":
            self._pos = pos
            self._state = self._before_object
            return True
        try:
            tagged = match_literal(text, pos, PYTHON_TAG)
        except Incomplete:
            if not final:
                raise
            tagged = False
        self._state = self._after_tag if tagged else self._in_content
        self._pos = pos + len(PYTHON_TAG) if tagged else 0
        return True

    def _in_content(self, text: str, final: bool) -> bool:
        index = self._read_content(text, final, (PYTHON_TAG,))
        if index is None:
            return False
        self._pos = index + len(PYTHON_TAG)
        self._state = self._after_tag
        return True

    def _after_tag(self, text: str, final: bool) -> bool:
        self._pos = skip_whitespace(text, self._pos)
        self._state = self._before_object
        return True

    def _before_object(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] != "{":
            raise MalformedToolCall("expected a JSON call object")
        self._call = JsonCallReader(
            pos, strict=True, start_call=self._start_call, arguments=self._arguments
        )
        self._state = self._in_object
        return True

    def _in_object(self, text: str, final: bool) -> bool:
        assert self._call is not None
        self._call.advance(text, final)
        assert self._call.end is not None
        self._pos = self.committed = self._call.end
        self._state = self._after_object
        return True

    def _after_object(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            return False
        if text[pos] == SEPARATOR:
            self._pos = skip_whitespace(text, pos + 1)
            self._state = self._next_call
            return True
        try:
            tagged = match_literal(text, pos, PYTHON_TAG)
        except Incomplete:
            if not final:
                raise
            tagged = False
        if tagged:
            self._pos = pos + len(PYTHON_TAG)
            self._state = self._after_tag
            return True
        self._state = self._dropping
        return True

    def _next_call(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text) and final:
            self._state = self._dropping
            return True
        try:
            if match_literal(text, pos, PYTHON_TAG):
                pos += len(PYTHON_TAG)
        except Incomplete:
            if not final:
                raise
        self._pos = pos
        self._state = self._before_object
        return True

    def _dropping(self, text: str, final: bool) -> bool:
        self._pos = self.committed = len(text)
        return False


class Llama3JsonToolParser(ToolParser):
    """``llama3_json``: Llama 3.x JSON calls."""

    name = "llama3_json"

    def reader(self, tools: Tools | None) -> DialectReader:
        return Llama3JsonReader(tools)
