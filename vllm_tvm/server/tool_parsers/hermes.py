"""Hermes-style tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The format of the Hermes 2 Pro / Hermes 3 fine-tunes, adopted by Qwen 2.5, QwQ, Qwen 3,
Granite 4, MiMo and others: content first, then one tagged JSON object per call. A final
``</tool_call>`` cut off by the end of generation is tolerated.
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
from vllm_tvm.server.tool_parsers.scanning import (
    Incomplete,
    match_literal,
    skip_whitespace,
)

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"


class HermesReader(DialectReader):
    """Content, then ``<tool_call>`` objects; other text between and after them is dropped."""

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._call: JsonCallReader | None = None

    def _initial_state(self) -> State:
        return self._in_content

    def _in_content(self, text: str, final: bool) -> bool:
        index = self._read_content(text, final, (CALL_START,))
        if index is None:
            return False
        self._pos = index + len(CALL_START)
        self._state = self._before_object
        return True

    def _before_object(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] != "{":
            raise MalformedToolCall(f"expected a JSON object after {CALL_START}")
        self._call = JsonCallReader(
            pos, strict=False, start_call=self._start_call, arguments=self._arguments
        )
        self._state = self._in_object
        return True

    def _in_object(self, text: str, final: bool) -> bool:
        assert self._call is not None
        self._call.advance(text, final)
        assert self._call.end is not None
        self._pos = self._call.end
        self._state = self._after_object
        return True

    def _after_object(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        try:
            if match_literal(text, pos, CALL_END):
                pos += len(CALL_END)
        except Incomplete:
            if not final:
                raise
        self._pos = self.committed = pos
        self._state = self._between_calls
        return True

    def _between_calls(self, text: str, final: bool) -> bool:
        index = self._skip_to(text, (CALL_START,))
        if index is None:
            return False
        self._pos = index + len(CALL_START)
        self._state = self._before_object
        return True


class HermesToolParser(ToolParser):
    """``hermes``: ``<tool_call>`` JSON objects."""

    name = "hermes"

    def reader(self, tools: Tools | None) -> DialectReader:
        return HermesReader(tools)
