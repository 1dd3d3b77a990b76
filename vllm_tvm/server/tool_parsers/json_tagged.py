"""Tool calls as JSON after a marker: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The Hermes 2 Pro / Hermes 3 format, and the many families that changed only its markers or
wrapped the objects in a JSON list: Granite 3 (``<|tool_call|>[...]``), Jamba and Hunyuan
(``<tool_calls>[...]</tool_calls>``), InternLM 2 (``<|action_start|><|plugin|>{...}
<|action_end|>``), Phi-4-mini (``functools[...]``), LongCat, GigaChat 3, Apertus
(``<|tools_prefix|>[{"NAME": {...}}]<|tools_suffix|>``, the name as the object's only key).
A reader is its markers and two switches: ``LEADING`` (a message that opens with ``[`` or
``{`` is a call list with no marker, read strictly so that a JSON answer stays content) and
``NAMED_OBJECTS`` (Apertus' object shape). Content is the text before the first marker; a
missing end marker at the end of the generation is tolerated; text between and after the
calls is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from vllm_tvm.server.tool_parsers.base import MalformedToolCall, State, Tools
from vllm_tvm.server.tool_parsers.json_call import JsonObjectDialect
from vllm_tvm.server.tool_parsers.scanning import (
    Incomplete,
    read_json_string,
    skip_optional,
    skip_whitespace,
)


class TaggedJsonReader(JsonObjectDialect):
    """Content, then per marker in ``STARTS`` a call object or a list of them, then ``END``."""

    STARTS: ClassVar[tuple[str, ...]] = ("<tool_call>",)
    END: ClassVar[str | None] = "</tool_call>"
    # Markers whose payload ends otherwise than with ``END`` (None: no end marker).
    END_OF: ClassVar[Mapping[str, str | None]] = {}
    LEADING: ClassVar[bool] = False
    NAMED_OBJECTS: ClassVar[bool] = False

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._strict = False
        self._in_list = False
        self._then_named: State = self._after_payload
        self._end = self.END

    def _initial_state(self) -> State:
        return self._at_start if self.LEADING else self._in_content

    def _at_start(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, 0)
        if pos >= len(text):
            if final:
                self._state = self._in_content
                return True
            return False
        head = text[pos : pos + max(map(len, self.STARTS))]
        if not final and any(len(head) < len(m) and m.startswith(head) for m in self.STARTS):
            return False  # perhaps a marker that starts with a bracket ([TOOL_CALLS])
        if text[pos] in "[{" and not any(text.startswith(m, pos) for m in self.STARTS):
            self._strict = True
            self._pos = pos
            self._state = self._payload
        else:
            self._state = self._in_content
        return True

    def _in_content(self, text: str, final: bool) -> bool:
        index = self._read_content(text, final, self.STARTS)
        if index is None:
            return False
        self._after_marker(text, index)
        return True

    def _after_marker(self, text: str, index: int) -> None:
        marker = next(m for m in self.STARTS if text.startswith(m, index))
        self._end = self.END_OF.get(marker, self.END)
        self._pos = index + len(marker)
        self._state = self._payload

    def _payload(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        self._in_list = text[pos] == "["
        self._pos = pos + 1 if self._in_list else pos
        self._state = self._call_item
        return True

    def _call_item(self, text: str, final: bool) -> bool:
        error = "expected a JSON call object"
        then = self._after_list_item if self._in_list else self._after_payload
        if self.NAMED_OBJECTS:
            return self._named_object(text, then)
        return self._read_call_object(text, strict=self._strict, error=error, then=then)

    def _named_object(self, text: str, then: State) -> bool:
        """Apertus' ``{"NAME": {...arguments...}}``: the name, then the arguments object."""
        start = self._object_start(text, "expected a {name: arguments} object")
        pos = skip_whitespace(text, start + 1)
        try:
            name, pos = read_json_string(text, pos)
        except ValueError as error:
            raise MalformedToolCall(str(error)) from None
        pos = skip_whitespace(text, pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] != ":" or not name:
            raise MalformedToolCall("expected a function name and ':'")
        self._start_call(name)
        self._pos = pos + 1
        self._then_named = then
        self._state = self._named_arguments
        return True

    def _named_arguments(self, text: str, final: bool) -> bool:
        error = "expected the arguments object after the function name"
        return self._read_arguments_object(text, error=error, then=self._named_close)

    def _named_close(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            raise Incomplete
        if text[pos] != "}":
            raise MalformedToolCall("expected '}' after a call's arguments")
        self._pos = self.committed = pos + 1
        self._state = self._then_named
        return True

    def _after_list_item(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text):
            if final and not self._strict:
                self._state = self._after_payload
                return True
            raise Incomplete
        if text[pos] == ",":
            self._pos = pos + 1
            self._state = self._call_item
        elif text[pos] == "]":
            self._pos = self.committed = pos + 1
            self._state = self._after_payload
        else:
            raise MalformedToolCall("expected ',' or ']' in the call list")
        return True

    def _after_payload(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if not self._in_list and not self._strict and text.startswith("{", pos):
            self._pos = pos  # MiniMax-M1 writes one object per line in one <tool_calls>
            self._state = self._call_item
            return True
        if self._end is not None:
            pos = skip_optional(text, pos, self._end, final)
        self._pos = self.committed = pos
        self._state = self._between_calls
        return True

    def _between_calls(self, text: str, final: bool) -> bool:
        index = self._skip_to(text, self.STARTS)
        if index is None:
            return False
        self._strict = False
        self._after_marker(text, index)
        return True


class HermesReader(TaggedJsonReader):
    """``hermes`` (and ``granite4``, ``ernie45``): ``<tool_call>`` objects."""


class LongcatReader(TaggedJsonReader):
    """``longcat``: LongCat-Flash's ``<longcat_tool_call>`` objects."""

    STARTS = ("<longcat_tool_call>",)
    END = "</longcat_tool_call>"


class ToolCallsListReader(TaggedJsonReader):
    """``jamba``, ``hunyuan_a13b``: a list of call objects in ``<tool_calls>``."""

    STARTS = ("<tool_calls>",)
    END = "</tool_calls>"


class InternLmReader(TaggedJsonReader):
    """``internlm``: InternLM 2's ``<|action_start|><|plugin|>`` objects (``parameters``)."""

    STARTS = ("<|action_start|><|plugin|>",)
    END = "<|action_end|>"


class Granite20bFcReader(TaggedJsonReader):
    """``granite-20b-fc``: one ``<function_call>`` before each object, no end marker."""

    STARTS = ("<function_call>",)
    END = None


class GraniteReader(TaggedJsonReader):
    """``granite``: Granite 3's list after ``<|tool_call|>`` (or the list alone)."""

    STARTS = ("<|tool_call|>", "<tool_call>")
    END = None
    LEADING = True


class XlamReader(TaggedJsonReader):
    """``xlam``: xLAM's bare list of calls, or the list in a ```json fence, after
    ``[TOOL_CALLS]`` or in ``<tool_call>`` tags (the forms vLLM's parser accepts)."""

    STARTS = ("<tool_call>", "```json", "[TOOL_CALLS]")
    END_OF: ClassVar[Mapping[str, str | None]] = {"```json": "```", "[TOOL_CALLS]": None}
    LEADING = True


class Phi4MiniJsonReader(TaggedJsonReader):
    """``phi4_mini_json``: Phi-4-mini's ``functools[...]`` list."""

    STARTS = ("functools",)
    END = None


class GigaChat3Reader(TaggedJsonReader):
    """``gigachat3``: the call object in a ``function call`` message after the content."""

    STARTS = (
        "<|message_sep|>\n\nfunction call<|role_sep|>",
        "function call<|role_sep|>",
        "<|function_call|>",
    )
    END = None


class ApertusReader(TaggedJsonReader):
    """``apertus``: ``<|tools_prefix|>[{"NAME": {...}}]<|tools_suffix|>``."""

    STARTS = ("<|tools_prefix|>",)
    END = "<|tools_suffix|>"
    NAMED_OBJECTS = True
