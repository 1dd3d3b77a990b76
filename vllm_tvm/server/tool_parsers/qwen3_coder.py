"""Qwen3-Coder XML tool calls, with values typed by the tool's JSON schema.

Qwen3-Coder, Qwen3.5, Nemotron 3 Nano and Step 3.5 write::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are bare text, so their JSON type comes from the request's tool schema: the chat
template renders objects and arrays as JSON and other values with Python's ``str`` (``True``,
``None``, ``3.5``), and reading a value back inverts that for the schema's type. A value whose
type is unknown, or that does not read as its type, stays a string. The newline the template
puts after ``>`` and before ``</parameter>`` is not part of the value. Each parameter is sent
once complete, as one more member of the arguments JSON object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from vllm_tvm.server.tool_parsers.base import (
    DialectReader,
    MalformedToolCall,
    State,
    ToolParser,
    Tools,
    function_schema,
)
from vllm_tvm.server.tool_parsers.python_literals import parse_python_literal
from vllm_tvm.server.tool_parsers.scanning import (
    Incomplete,
    find_first,
    match_literal,
    skip_optional,
    skip_whitespace,
)

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"
FUNCTION_START = "<function="
FUNCTION_END = "</function>"
PARAMETER_START = "<parameter="
PARAMETER_END = "</parameter>"
_INTEGER = re.compile(r"[+-]?\d+")
_NULLS = ("null", "None")
_BOOLEANS = {"true": True, "false": False}


class Qwen3CoderReader(DialectReader):
    """Content, then ``<tool_call><function=...>`` blocks (a bare ``<function=`` also
    starts a call); other text between and after them is dropped."""

    def __init__(self, tools: Tools | None) -> None:
        super().__init__(tools)
        self._wrapped = False
        self._parameters: Mapping[str, Any] = {}
        self._members = 0
        self._key = ""
        self._value_start = 0

    def _initial_state(self) -> State:
        return self._in_content

    def _in_content(self, text: str, final: bool) -> bool:
        index = self._read_content(text, final, (CALL_START, FUNCTION_START))
        if index is None:
            return False
        self._open_call(text, index)
        return True

    def _open_call(self, text: str, index: int) -> None:
        self._wrapped = text.startswith(CALL_START, index)
        self._pos = index + len(CALL_START) if self._wrapped else index
        self._state = self._function_open

    def _function_open(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if not match_literal(text, pos, FUNCTION_START):
            raise MalformedToolCall(f"expected {FUNCTION_START} in a tool call")
        name, self._pos = _tag_value(text, pos + len(FUNCTION_START))
        self._start_call(name)
        self._parameters = _parameter_schemas(self.tools, name)
        self._members = 0
        self._state = self._next_parameter
        return True

    def _next_parameter(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if match_literal(text, pos, FUNCTION_END):
            self._arguments("}" if self._members else "{}")
            self._pos = self.committed = pos + len(FUNCTION_END)
            self._state = self._function_closed
            return True
        if not match_literal(text, pos, PARAMETER_START):
            raise MalformedToolCall(f"expected {PARAMETER_START} or {FUNCTION_END}")
        self._key, self._value_start = _tag_value(text, pos + len(PARAMETER_START))
        self._pos = self._value_start
        self._state = self._parameter_value
        return True

    def _parameter_value(self, text: str, final: bool) -> bool:
        found = find_first(text, self._pos, (PARAMETER_END,))
        if found is None:
            self._pos = max(self._value_start, len(text) - len(PARAMETER_END) + 1)
            raise Incomplete
        raw = text[self._value_start : found[0]]
        raw = raw.removeprefix("\n").removesuffix("\n")
        value = typed_value(raw, self._parameters.get(self._key))
        member = json.dumps(self._key, ensure_ascii=False) + ": "
        member += json.dumps(value, ensure_ascii=False)
        self._arguments(("{" if not self._members else ", ") + member)
        self._members += 1
        self._pos = found[0] + len(PARAMETER_END)
        self._state = self._next_parameter
        return True

    def _function_closed(self, text: str, final: bool) -> bool:
        pos = skip_whitespace(text, self._pos)
        if self._wrapped:
            pos = skip_optional(text, pos, CALL_END, final)
        self._pos = self.committed = pos
        self._state = self._between_calls
        return True

    def _between_calls(self, text: str, final: bool) -> bool:
        index = self._skip_to(text, (CALL_START, FUNCTION_START))
        if index is None:
            return False
        self._open_call(text, index)
        return True


def _tag_value(text: str, pos: int) -> tuple[str, int]:
    """The name in ``<function=NAME>`` / ``<parameter=NAME>`` from after ``=``, and the index
    after ``>``."""
    end = text.find(">", pos)
    name = text[pos : end if end >= 0 else len(text)]
    if "<" in name or "\n" in name:
        raise MalformedToolCall(f"unterminated tag name {name[:40]!r}")
    if end < 0:
        raise Incomplete
    name = name.strip()
    if not name:
        raise MalformedToolCall("empty tag name")
    return name, end + 1


def _parameter_schemas(tools: Tools | None, name: str) -> Mapping[str, Any]:
    function = function_schema(tools, name)
    parameters = function.get("parameters") if function else None
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def _schema_types(schema: Any) -> list[str]:
    """The JSON types a parameter schema allows (``type``, or the members of ``anyOf`` /
    ``oneOf``); empty when it does not say."""
    if not isinstance(schema, Mapping):
        return []
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    types: list[str] = []
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or ():
            types += [t for t in _schema_types(option) if t not in types]
    if not types and "enum" in schema:
        types = ["string"] if all(isinstance(v, str) for v in schema["enum"]) else []
    return types


def typed_value(raw: str, schema: Any) -> Any:
    """The JSON value of a parameter's text under its JSON ``schema`` (None: unknown, so
    the text stays a string)."""
    types = _schema_types(schema)
    if "null" in types and raw.strip() in _NULLS:
        return None
    for kind in types:
        if kind == "string":
            return raw
        converted = _as_type(raw.strip(), kind)
        if converted is not _NOT_THIS_TYPE:
            return converted
    return raw


_NOT_THIS_TYPE = object()


def _as_type(text: str, kind: str) -> Any:
    if kind == "integer":
        return int(text) if _INTEGER.fullmatch(text) else _NOT_THIS_TYPE
    if kind == "number":
        return _number(text)
    if kind == "boolean":
        return _BOOLEANS.get(text.lower(), _NOT_THIS_TYPE)
    if kind in ("object", "array"):
        expected = dict if kind == "object" else list
        for reader in (json.loads, parse_python_literal):
            try:
                value = reader(text)
            except ValueError:
                continue
            if isinstance(value, expected):
                return value
    return _NOT_THIS_TYPE


def _number(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return _NOT_THIS_TYPE
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _NOT_THIS_TYPE
    return value


class Qwen3CoderToolParser(ToolParser):
    """``qwen3_coder``: XML ``<function=...><parameter=...>`` calls."""

    name = "qwen3_coder"
    reader_type = Qwen3CoderReader
