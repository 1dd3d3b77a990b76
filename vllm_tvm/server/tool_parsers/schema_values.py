"""Parameter values of the XML-style dialects, turned into JSON values.

XML-style calls write each argument as bare text between tags, so the JSON type of a value
has to come from somewhere else: the request's tool schema, an attribute on the tag
(DeepSeek's ``string="false"``), or the value's own JSON spelling. Chat templates render
objects and arrays as JSON (Qwen-Coder and Seed-OSS with Python's ``str``) and scalars with
``str``, so each reader here inverts one such rendering. A value that does not read as the
type it should have stays a string, so nothing is lost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from vllm_tvm.server.tool_parsers.base import Tools, function_schema
from vllm_tvm.server.tool_parsers.python_literals import parse_python_literal

_INTEGER = re.compile(r"[+-]?\d+")
_NULLS = ("null", "None")
_BOOLEANS = {"true": True, "false": False}
_CDATA_OPEN = "<![CDATA["
_CDATA_CLOSE = "]]>"


def parameter_schemas(tools: Tools | None, name: str) -> Mapping[str, Any]:
    """The ``properties`` schemas of the function ``name`` among ``tools`` (empty if
    unknown)."""
    function = function_schema(tools, name)
    parameters = function.get("parameters") if function else None
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def schema_types(schema: Any) -> list[str]:
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
            types += [t for t in schema_types(option) if t not in types]
    if not types and "enum" in schema:
        types = ["string"] if all(isinstance(v, str) for v in schema["enum"]) else []
    return types


def typed_value(raw: str, schema: Any) -> Any:
    """The JSON value of a parameter's text under its JSON ``schema`` (None: unknown, so
    the text stays a string)."""
    types = schema_types(schema)
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


def json_unless_string(raw: str, schema: Any, attributes: str = "") -> Any:
    """A value its template renders as JSON (GLM, MiniMax, Step 3): verbatim where the
    schema says string, else its JSON (or Python literal) reading, else by the schema."""
    if "string" in schema_types(schema):
        return typed_value(raw, schema)
    for reader in (json.loads, parse_python_literal):
        try:
            return reader(raw.strip())
        except ValueError:
            continue
    return typed_value(raw, schema)


def typed_by_attribute(raw: str, schema: Any, attributes: str = "") -> Any:
    """DeepSeek V3.2/V4's values: ``string="true"`` is verbatim text, ``string="false"``
    JSON; a value without the attribute is read as ``json_unless_string`` reads it."""
    if 'string="true"' in attributes:
        return raw
    if 'string="false"' in attributes:
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return json_unless_string(raw, schema)


def typed_by_schema(raw: str, schema: Any, attributes: str = "") -> Any:
    """Qwen-Coder / Seed-OSS / MiniCPM values: typed by the schema, a CDATA section
    (MiniCPM wraps text holding ``<``, ``&`` or newlines in one) read as its text."""
    if raw.startswith(_CDATA_OPEN) and raw.endswith(_CDATA_CLOSE):
        raw = raw[len(_CDATA_OPEN) : -len(_CDATA_CLOSE)]
    return typed_value(raw, schema)
