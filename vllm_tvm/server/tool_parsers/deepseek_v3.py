"""DeepSeek V3 / R1 / V3.1 and Kimi K2 tool calls, between special tokens.

The tokens are written here with ASCII ``|`` and ``_``; the real ones use the full-width bar
U+FF5C and U+2581 between words (see the constants). V3 and the R1 distills write, inside
``<|tool_calls_begin|>...<|tool_calls_end|>``::

    <|tool_call_begin|>function<|tool_sep|>NAME
    ```json
    {...arguments...}
    ```<|tool_call_end|>

V3.1 drops the type and the fence: ``<|tool_call_begin|>NAME<|tool_sep|>{...}<|tool_call_end|>``.
Both are read: after the separator a ``{`` means the V3.1 form. Kimi K2 writes the V3.1 shape
with its own tokens and ``functions.NAME:INDEX`` for the name. A missing closing fence, call
end or block end at the very end of the generation is tolerated (one of DeepSeek's own
templates leaves the block end out after a single call).
"""

from __future__ import annotations

from typing import ClassVar

from vllm_tvm.server.tool_parsers.base import MalformedToolCall, State, Tools
from vllm_tvm.server.tool_parsers.json_call import JsonObjectDialect
from vllm_tvm.server.tool_parsers.scanning import (
    Incomplete,
    find_first,
    match_literal,
    partial_marker_length,
    skip_optional,
    skip_whitespace,
)

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"  # noqa: RUF001
CALLS_END = "<｜tool▁calls▁end｜>"  # noqa: RUF001
CALL_BEGIN = "<｜tool▁call▁begin｜>"  # noqa: RUF001
CALL_END = "<｜tool▁call▁end｜>"  # noqa: RUF001
SEPARATOR = "<｜tool▁sep｜>"  # noqa: RUF001
FENCE = "```"
FENCE_LANGUAGE = "json"


class DeepSeekV3Reader(JsonObjectDialect):
    """Content, then one block of calls; text after the block is dropped."""

    CALLS_BEGIN: ClassVar[str] = CALLS_BEGIN
    CALLS_END: ClassVar[str] = CALLS_END
    CALL_BEGIN: ClassVar[str] = CALL_BEGIN
    CALL_END: ClassVar[str] = CALL_END
    SEPARATOR: ClassVar[str] = SEPARATOR

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._head = ""
        self._fenced = False
        self._calls = 0

    def _initial_state(self) -> State:
        return self._in_content

    def _in_content(self, text: str, final: bool) -> bool:
        return self._content_until(text, final, self.CALLS_BEGIN, self._in_block)

    def _in_block(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text) and final and self._calls:
            self._state = self._drop_rest
            return True
        if match_literal(text, pos, self.CALL_BEGIN):
            self._pos = pos + len(self.CALL_BEGIN)
            self._state = self._call_head
            return True
        if match_literal(text, pos, self.CALLS_END) and self._calls:
            self._pos = self.committed = pos + len(self.CALLS_END)
            self._state = self._drop_rest
            return True
        raise MalformedToolCall(f"expected {self.CALL_BEGIN} in the tool-call block")

    def _call_head(self, text: str, final: bool) -> bool:
        found = find_first(text, self._pos, (self.SEPARATOR,))
        if found is None:
            head = text[
                self._pos : len(text) - partial_marker_length(text, self._pos, (self.SEPARATOR,))
            ]
            if "\n" in head or "<" in head:
                raise MalformedToolCall(f"expected {self.SEPARATOR} in a tool call")
            raise Incomplete
        self._head = text[self._pos : found[0]].strip()
        self._pos = found[0] + len(self.SEPARATOR)
        self._state = self._after_separator
        return True

    def _after_separator(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] == "{":
            self._begin_call(self.call_name(self._head))
            self._fenced = False
            self._pos = pos
            self._state = self._arguments_open
            return True
        found = find_first(text, pos, ("\n", FENCE))
        if found is None:
            raise Incomplete
        self._begin_call(text[pos : found[0]].strip())
        self._fenced = True
        self._pos = found[0]
        self._state = self._opening_fence
        return True

    def call_name(self, head: str) -> str:
        """The function name in the text between the call's begin token and the separator
        (DeepSeek V3.1 writes the name alone there)."""
        return head

    def _begin_call(self, name: str) -> None:
        if not name or any(c.isspace() for c in name):
            raise MalformedToolCall(f"invalid function name {name!r}")
        self._start_call(name)
        self._calls += 1

    def _opening_fence(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if not match_literal(text, pos, FENCE):
            raise MalformedToolCall("expected a ```json fence before the arguments")
        pos += len(FENCE)
        if match_literal(text, pos, FENCE_LANGUAGE):
            pos += len(FENCE_LANGUAGE)
        self._pos = pos
        self._state = self._arguments_open
        return True

    def _arguments_open(self, text: str, final: bool) -> bool:
        error = "expected the JSON arguments object"
        then = self._closing_fence if self._fenced else self._call_end
        return self._read_arguments_object(text, error=error, then=then)

    def _closing_fence(self, text: str, final: bool) -> bool:
        self._pos = self._optional(text, final, FENCE)
        self._state = self._call_end
        return True

    def _call_end(self, text: str, final: bool) -> bool:
        self._pos = self.committed = self._optional(text, final, self.CALL_END)
        self._state = self._in_block
        return True

    def _optional(self, text: str, final: bool, literal: str) -> int:
        """The index after ``literal`` (after whitespace); at the end of a finished text the
        literal may be missing."""
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text) and final:
            return pos
        end = skip_optional(text, pos, literal, final)
        if end == pos:
            raise MalformedToolCall(f"expected {literal} after the call arguments")
        return end


class KimiK2Reader(DeepSeekV3Reader):
    """``kimi_k2``: ``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>
    {...}<|tool_call_end|>`` calls in a ``<|tool_calls_section_begin|>`` section."""

    CALLS_BEGIN = "<|tool_calls_section_begin|>"
    CALLS_END = "<|tool_calls_section_end|>"
    CALL_BEGIN = "<|tool_call_begin|>"
    CALL_END = "<|tool_call_end|>"
    SEPARATOR = "<|tool_call_argument_begin|>"

    def call_name(self, head: str) -> str:
        return head.rpartition(":")[0].removeprefix("functions.") if ":" in head else head
