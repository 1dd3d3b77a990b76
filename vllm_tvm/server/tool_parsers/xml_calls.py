"""Tool calls written as XML-style tags: a function name, then one tag per parameter.

Many families share this shape and differ only in their tag spellings:

- Qwen3-Coder: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>``
- GLM-4.5/4.7: ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>``
- MiniMax-M2: ``<minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter>
  </invoke></minimax:tool_call>``
- DeepSeek V3.2/V4: the MiniMax shape in DSML tags (``<|DSML|invoke name=...>``, written with
  full-width bars), with a ``string="true|false"`` attribute on each parameter.

``XmlCallFormat`` names one family's tags and how its values read back as JSON
(``schema_values``); ``XmlCallReader`` reads any of them incrementally. Calls either sit in a
block (``block_open``/``block_close``) or stand one per wrapper (``wrap_open``/``wrap_close``),
and content is the text before the first. Each parameter is sent once its closing tag has
come, as one more member of the arguments JSON object; text between and after calls is
dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

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
from vllm_tvm.server.tool_parsers.schema_values import parameter_schemas, typed_by_schema

ValueReader = Callable[[str, Any, str], Any]


@dataclass(frozen=True)
class XmlCallFormat:
    """The tags of one XML-style dialect.

    A call is ``call_open NAME name_end``, then per parameter ``param_open KEY key_end``
    (attributes up to ``attributes_end`` when set, then ``value_open`` when set) ``VALUE
    value_close``, then ``call_close``. With ``open_names`` a name or key also ends where the
    next parameter or the call's end begins (GLM-4.7 writes ``NAME<arg_key>``).
    ``read_value(raw, schema, attributes)`` gives a value's JSON. ``bare_calls`` lets
    ``call_open`` start a call with no wrapper; ``padded_values`` drops the newline the
    template writes on each side of a value (Qwen3-Coder); ``json_bodies`` lets a wrapper
    hold a Hermes JSON object instead of tags.
    """

    call_open: str
    name_end: str
    param_open: str
    key_end: str
    value_close: str
    call_close: str
    attributes_end: str | None = None
    value_open: str | None = None
    block_open: str | None = None
    block_close: str | None = None
    wrap_open: str | None = None
    wrap_close: str | None = None
    wrap_prefix: str | None = None
    open_names: bool = False
    padded_values: bool = False
    bare_calls: bool = False
    json_bodies: bool = False
    read_value: ValueReader = typed_by_schema

    @property
    def starts(self) -> tuple[str, ...]:
        """The markers that end the content and start the first call (or block)."""
        if self.block_open is not None:
            return (self.block_open,)
        if self.wrap_open is None:
            return (self.call_open,)
        return (self.wrap_open, self.call_open) if self.bare_calls else (self.wrap_open,)


class XmlCallReader(JsonObjectDialect):
    """Content, then calls in the tags of ``FORMAT``."""

    FORMAT: ClassVar[XmlCallFormat]

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._wrapped = False
        self._block_calls = 0
        self._parameters: Mapping[str, Any] = {}
        self._members = 0
        self._key = ""
        self._attributes = ""
        self._value_start = 0

    def _initial_state(self) -> State:
        return self._in_content

    def _in_content(self, text: str, final: bool) -> bool:
        index = self._read_content(text, final, self.FORMAT.starts)
        if index is None:
            return False
        self._open_at(text, index)
        return True

    def _open_at(self, text: str, index: int) -> None:
        """Read on from the start marker at ``index``."""
        form = self.FORMAT
        if form.block_open is not None:
            self._pos = index + len(form.block_open)
            self._block_calls = 0
            self._state = self._in_block
        elif form.wrap_open is not None and text.startswith(form.wrap_open, index):
            self._wrapped = True
            self._pos = index + len(form.wrap_open)
            self._state = self._after_wrap_open
        else:
            self._wrapped = False
            self._pos = index
            self._state = self._call_open

    def _in_block(self, text: str, final: bool) -> bool:
        form = self.FORMAT
        pos = skip_whitespace(text, self._pos)
        if pos >= len(text) and final and self._block_calls:
            self._state = self._drop_rest
            return True
        if form.wrap_open is not None and match_literal(text, pos, form.wrap_open):
            self._wrapped = True
            self._pos = pos + len(form.wrap_open)
            self._state = self._after_wrap_open
            return True
        if form.wrap_open is None and match_literal(text, pos, form.call_open):
            self._pos = pos
            self._state = self._call_open
            return True
        assert form.block_close is not None
        if self._block_calls and match_literal(text, pos, form.block_close):
            self._pos = self.committed = pos + len(form.block_close)
            self._state = self._between_calls
            return True
        raise MalformedToolCall(f"expected a call in the {form.block_open} block")

    def _after_wrap_open(self, text: str, final: bool) -> bool:
        form = self.FORMAT
        pos = skip_whitespace(text, self._pos)
        if form.wrap_prefix is not None:
            pos = skip_whitespace(text, skip_optional(text, pos, form.wrap_prefix, final))
        if pos >= len(text):
            raise Incomplete
        self._pos = pos
        if form.json_bodies and text[pos] == "{":
            error = f"expected a JSON object after {form.wrap_open}"
            return self._read_call_object(text, strict=False, error=error, then=self._closed)
        self._state = self._call_open
        return True

    def _call_open(self, text: str, final: bool) -> bool:
        form = self.FORMAT
        pos = skip_whitespace(text, self._pos)
        if not match_literal(text, pos, form.call_open):
            raise MalformedToolCall(f"expected {form.call_open} in a tool call")
        name, self._pos = self._tag_text(text, pos + len(form.call_open), form.name_end)
        self._start_call(name)
        self._block_calls += 1
        self._parameters = parameter_schemas(self.tools, name)
        self._members = 0
        self._state = self._next_parameter
        return True

    def _tag_text(self, text: str, pos: int, end: str) -> tuple[str, int]:
        """The name or key from ``pos`` up to ``end`` (consumed), or with ``open_names`` to
        the next parameter or the call's end (left to read), and the index to read on from."""
        form = self.FORMAT
        ends = (end, form.param_open, form.call_close) if form.open_names else (end,)
        found = find_first(text, pos, ends)
        stop = found[0] if found else len(text) - partial_marker_length(text, pos, ends)
        value = text[pos:stop]
        if "<" in value or "\n" in value.strip():
            raise MalformedToolCall(f"unterminated tag text {value[:40]!r}")
        if found is None:
            raise Incomplete
        value = value.strip()
        if not value:
            raise MalformedToolCall("an empty name in a tool call")
        return value, stop + len(end) if found[1] == end else stop

    def _next_parameter(self, text: str, final: bool) -> bool:
        form = self.FORMAT
        pos = skip_whitespace(text, self._pos)
        if match_literal(text, pos, form.call_close):
            self._arguments("}" if self._members else "{}")
            self._pos = self.committed = pos + len(form.call_close)
            self._state = self._closed
            return True
        if not match_literal(text, pos, form.param_open):
            raise MalformedToolCall(f"expected {form.param_open} or {form.call_close}")
        self._key, pos = self._tag_text(text, pos + len(form.param_open), form.key_end)
        self._attributes = ""
        if form.attributes_end is not None:
            end = text.find(form.attributes_end, pos)
            if end < 0:
                if "<" in text[pos:] or "\n" in text[pos:]:
                    raise MalformedToolCall("unterminated parameter attributes")
                raise Incomplete
            self._attributes, pos = text[pos:end], end + len(form.attributes_end)
        if form.value_open is not None:
            pos = skip_whitespace(text, pos)
            if not match_literal(text, pos, form.value_open):
                raise MalformedToolCall(f"expected {form.value_open} after a key")
            pos += len(form.value_open)
        self._pos = self._value_start = pos
        self._state = self._parameter_value
        return True

    def _parameter_value(self, text: str, final: bool) -> bool:
        close = self.FORMAT.value_close
        found = text.find(close, self._pos)
        if found < 0:
            self._pos = max(self._value_start, len(text) - len(close) + 1)
            raise Incomplete
        raw = text[self._value_start : found]
        if self.FORMAT.padded_values:
            raw = raw.removeprefix("\n").removesuffix("\n")
        value = self.FORMAT.read_value(raw, self._parameters.get(self._key), self._attributes)
        member = json.dumps(self._key, ensure_ascii=False) + ": "
        member += json.dumps(value, ensure_ascii=False)
        self._arguments(("{" if not self._members else ", ") + member)
        self._members += 1
        self._pos = found + len(close)
        self._state = self._next_parameter
        return True

    def _closed(self, text: str, final: bool) -> bool:
        """After a call's last tag (or its JSON object): the wrapper's end, if any."""
        form = self.FORMAT
        pos = skip_whitespace(text, self._pos)
        if self._wrapped and form.wrap_close is not None:
            pos = skip_optional(text, pos, form.wrap_close, final)
        self._pos = self.committed = pos
        self._state = self._in_block if form.block_open is not None else self._between_calls
        return True

    def _between_calls(self, text: str, final: bool) -> bool:
        """After a call (or a block): text is dropped up to the next start marker."""
        index = self._skip_to(text, self.FORMAT.starts)
        if index is None:
            return False
        self._open_at(text, index)
        return True
