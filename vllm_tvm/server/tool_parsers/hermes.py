"""Hermes-style tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The format of the Hermes 2 Pro / Hermes 3 fine-tunes, adopted by Qwen 2.5, QwQ, Qwen 3,
Granite 4, MiMo and others: content first, then one tagged JSON object per call. A final
``</tool_call>`` cut off by the end of generation is tolerated.
"""

from __future__ import annotations

from vllm_tvm.server.tool_parsers.base import State, ToolParser
from vllm_tvm.server.tool_parsers.json_call import JsonObjectDialect
from vllm_tvm.server.tool_parsers.scanning import skip_optional, skip_whitespace

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"


class HermesReader(JsonObjectDialect):
    """Content, then ``<tool_call>`` objects; other text between and after them is dropped."""

    def _initial_state(self) -> State:
        return self._in_content

    def _in_content(self, text: str, final: bool) -> bool:
        return self._content_until(text, final, CALL_START, self._call_object)

    def _call_object(self, text: str, final: bool) -> bool:
        error = f"expected a JSON object after {CALL_START}"
        return self._read_call_object(text, strict=False, error=error, then=self._after_call)

    def _after_call(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        self._pos = self.committed = skip_optional(text, pos, CALL_END, final)
        self._state = self._between_calls
        return True

    def _between_calls(self, text: str, final: bool) -> bool:
        return self._skip_until(text, CALL_START, self._call_object)


class HermesToolParser(ToolParser):
    """``hermes``: ``<tool_call>`` JSON objects."""

    name = "hermes"
    reader_type = HermesReader
