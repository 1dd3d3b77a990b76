"""What a request asks the output to look like: vLLM's `StructuredOutputsParams` and the
OpenAI `response_format` shapes that map onto it.

Why it exists: the Python API (`SamplingParams.structured_outputs`), the OpenAI server
(`response_format`, and vLLM's `structured_outputs` extra body field) and the engine all
speak about one constraint object. Keeping vLLM's field names lets vLLM client code run
unchanged; checking the shape here (exactly one constraint, the right types) turns a
malformed request into a ValueError before any grammar work starts. This module imports no
grammar engine, so the server can validate shapes without loading one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

ConstraintKind = Literal["json", "json_object", "regex", "choice", "grammar"]
CONSTRAINT_FIELDS: tuple[str, ...] = ("json", "regex", "choice", "grammar", "json_object")
RESPONSE_FORMAT_TYPES: tuple[str, ...] = ("text", "json_object", "json_schema")


@dataclass(kw_only=True)
class StructuredOutputsParams:
    """One structured-output constraint, with vLLM's field names.

    Exactly one of `json` (a JSON schema, as a dict or JSON text), `regex`, `choice` (a list
    of strings), `grammar` (Lark or llama.cpp GBNF text) or `json_object=True` (any JSON
    object) must be set. The options tune JSON constraints: `disable_any_whitespace`
    forbids whitespace between JSON tokens (by default any amount is allowed, as in vLLM),
    `whitespace_pattern` replaces the whitespace regex, and `disable_additional_properties`
    closes every object schema that lists `properties` but says nothing about
    `additionalProperties`. Unset (None), that is left to whoever runs the request (the
    server's --structured-outputs-config); `closes_objects` says what the grammar does, by
    default close them, as vLLM's default backend (xgrammar) does.
    """

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool | None = None
    whitespace_pattern: str | None = None

    def __post_init__(self) -> None:
        given = [name for name in CONSTRAINT_FIELDS if self._is_set(name)]
        if len(given) != 1:
            raise ValueError(
                "structured outputs need exactly one constraint of "
                f"{', '.join(CONSTRAINT_FIELDS)}; got {given or 'none'}."
            )
        self._check_types()

    def _is_set(self, name: str) -> bool:
        value = getattr(self, name)
        return bool(value) if name == "json_object" else value is not None

    def _check_types(self) -> None:
        if self.json is not None and not isinstance(self.json, (str, dict)):
            raise ValueError(
                f"structured outputs json must be a JSON schema (dict or JSON text), "
                f"got {type(self.json).__name__}: {_preview(self.json)}."
            )
        for name in ("regex", "grammar", "whitespace_pattern"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(
                    f"structured outputs {name} must be a non-empty string, got {value!r}."
                )
        if self.choice is not None:
            if isinstance(self.choice, (str, bytes)) or not isinstance(self.choice, list):
                raise ValueError(
                    f"structured outputs choice must be a list of strings, got {self.choice!r}."
                )
            if not self.choice or any(not isinstance(c, str) for c in self.choice):
                raise ValueError(
                    "structured outputs choice must be a non-empty list of strings, "
                    f"got {self.choice!r}."
                )

    @property
    def closes_objects(self) -> bool:
        """Whether object schemas silent about `additionalProperties` get none: yes unless
        `disable_additional_properties` is False."""
        return self.disable_additional_properties is not False

    @property
    def kind(self) -> ConstraintKind:
        """Which constraint this is: json, json_object, regex, choice or grammar."""
        for name in CONSTRAINT_FIELDS:
            if self._is_set(name):
                return name  # type: ignore[return-value]
        raise AssertionError("validated in __post_init__")

    def describe(self) -> str:
        """A short name of the constraint with (a bounded preview of) its value."""
        names = {
            "json": "JSON schema",
            "json_object": "JSON object constraint",
            "regex": "regex",
            "choice": "choice",
            "grammar": "grammar",
        }
        return f"{names[self.kind]} {_preview(getattr(self, self.kind))}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StructuredOutputsParams:
        """Build from a JSON body's `structured_outputs` object; unknown keys are refused."""
        if not isinstance(data, Mapping):
            raise ValueError(
                f"structured_outputs must be an object, got {type(data).__name__}: "
                f"{_preview(data)}."
            )
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(
                f"unsupported structured_outputs field(s) {unknown}; supported: {', '.join(known)}."
            )
        return cls(**dict(data))


def structured_outputs_from_response_format(
    response_format: Mapping[str, Any] | None,
) -> StructuredOutputsParams | None:
    """Map an OpenAI `response_format` to a constraint (None for `text` or no format).

    Accepted shapes: `{"type": "text"}`, `{"type": "json_object"}` and
    `{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}`.
    """
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise ValueError(
            f"response_format must be an object, got {type(response_format).__name__}: "
            f"{_preview(response_format)}."
        )
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or spec.get("schema") is None:
            raise ValueError(
                "response_format of type json_schema needs a json_schema object with a "
                f"'schema' field, got json_schema={_preview(spec)}."
            )
        return StructuredOutputsParams(json=spec["schema"])
    raise ValueError(
        f"unsupported response_format type {kind!r}; supported: {', '.join(RESPONSE_FORMAT_TYPES)}."
    )


def _preview(value: object, limit: int = 200) -> str:
    """A bounded rendering of a request value for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
