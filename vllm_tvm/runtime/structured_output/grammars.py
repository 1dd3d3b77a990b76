"""Turn a `StructuredOutputsParams` into the grammar text that llguidance compiles.

Why it exists: each constraint kind reaches llguidance by a different door (JSON schema
compiler, regex, Lark, GBNF converted to Lark, a choice list written as Lark alternatives)
and the JSON options (whitespace, closed objects) are ours to translate. Keeping that
translation in one place keeps the matcher module about tokens and masks only.

Formats accepted, as llguidance defines them: `regex` is Rust `regex` syntax matched
against the whole output; `grammar` is llguidance's Lark dialect (`start: ...`) or
llama.cpp GBNF (`root ::= ...`, the EBNF style vLLM's xgrammar backend takes), told apart
by llguidance itself; `json` is the subset of JSON Schema that llguidance implements
(its docs/json_schema.md): keywords it knows but does not implement (`uniqueItems`, `not`,
`dependentRequired`, ...) make the schema invalid rather than being silently dropped.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import llguidance

from vllm_tvm.runtime.structured_output.params import StructuredOutputsParams

# Keywords whose value maps names to subschemas, and keywords whose value is a subschema or
# a list of them: where a closed-object rewrite must look for nested object schemas.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SUBSCHEMAS = (
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "allOf",
    "anyOf",
    "oneOf",
)


def grammar_text(params: StructuredOutputsParams) -> str:
    """The llguidance grammar for `params` (ValueError when its text cannot be read).

    This only translates; errors the grammar engine finds (an unsupported schema, a bad
    regex, an undefined rule) surface when the matcher is built.
    """
    kind = params.kind
    if kind in ("json", "json_object"):
        schema = {"type": "object"} if kind == "json_object" else _schema_object(params)
        if params.closes_objects:
            schema = closed_objects(schema)
        options: dict[str, Any] = {"whitespace_flexible": not params.disable_any_whitespace}
        if params.whitespace_pattern is not None:
            options["whitespace_pattern"] = params.whitespace_pattern
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=options)
    if kind == "regex":
        assert params.regex is not None
        return llguidance.LLMatcher.grammar_from_regex(params.regex)
    if kind == "choice":
        assert params.choice is not None
        return llguidance.grammar_from("choice", params.choice)  # type: ignore[arg-type]
    assert params.grammar is not None
    try:
        return llguidance.grammar_from("grammar", params.grammar)
    except ValueError as exc:
        raise ValueError(f"invalid {params.describe()}: {exc}") from exc


def _schema_object(params: StructuredOutputsParams) -> dict[str, Any] | bool:
    schema = params.json
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid {params.describe()}: not JSON text ({exc}).") from exc
    if not isinstance(schema, (dict, bool)):
        raise ValueError(
            f"invalid {params.describe()}: a JSON schema must be an object or "
            f"a boolean, got {type(schema).__name__}."
        )
    return schema


def closed_objects(schema: dict[str, Any] | bool) -> dict[str, Any] | bool:
    """A copy of `schema` where every object schema with `properties` (or
    `patternProperties`) and no `additionalProperties` gets `additionalProperties: false`."""
    result = copy.deepcopy(schema)
    _close_in_place(result)
    return result


def _close_in_place(node: object) -> None:
    if isinstance(node, list):
        for item in node:
            _close_in_place(item)
        return
    if not isinstance(node, dict):
        return
    for key in _SCHEMA_MAPS:
        children = node.get(key)
        if isinstance(children, dict):
            for child in children.values():
                _close_in_place(child)
    for key in _SUBSCHEMAS:
        _close_in_place(node.get(key))
    lists_properties = isinstance(node.get("properties"), dict) or isinstance(
        node.get("patternProperties"), dict
    )
    if lists_properties and "additionalProperties" not in node:
        node["additionalProperties"] = False
