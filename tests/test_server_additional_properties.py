"""Structured output closes JSON objects by default, as vLLM's default backend does: a schema
that lists `properties` and says nothing about `additionalProperties` gets no other property.

Specification: the request shapes instructor and LangChain send by default (a
`response_format` json_schema; a named tool whose function is not strict) produce JSON that
validates with `additionalProperties: false` added; the server's
`--structured-outputs-config '{"disable_additional_properties": false}'` leaves objects open
for requests that do not say, and a request's own `disable_additional_properties` wins.
"""

from __future__ import annotations

import json

import jsonschema_rs
import pytest
from server_helpers import MODEL_NAME

from vllm_tvm.runtime.structured_output import StructuredOutputsParams

USER = [{"role": "user", "content": "Pick a mode."}]
# Bounded values: the tiny model's free text would never close an unbounded string.
OPEN_SCHEMA = {
    "title": "Mode",
    "type": "object",
    "properties": {
        "mode": {"enum": ["fast", "slow"]},
        "level": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["mode", "level"],
}
CLOSED_SCHEMA = {**OPEN_SCHEMA, "additionalProperties": False}


def _toward_more_properties(server) -> dict[str, int]:
    """A logit bias toward `,` and `"`: where the grammar allows another property, the
    model starts one (and with open objects never stops adding them)."""
    encode = server.ctx.tokenizer.encode
    return {str(encode(text, add_special_tokens=False)[0]): 100 for text in (",", '"')}


def test_a_json_schema_response_format_has_only_the_schemas_properties(server, client):
    result = client.chat.completions.create(
        logit_bias=_toward_more_properties(server),
        model=MODEL_NAME,
        messages=USER,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "Mode", "schema": OPEN_SCHEMA, "strict": False},
        },
        max_tokens=300,
        temperature=0.0,
    )
    assert result.choices[0].finish_reason == "stop"
    jsonschema_rs.validate(CLOSED_SCHEMA, json.loads(result.choices[0].message.content))


def test_a_non_strict_named_tool_gets_only_its_parameters(server, client):
    tool = {
        "type": "function",
        "function": {"name": "Mode", "description": "A mode.", "parameters": OPEN_SCHEMA},
    }
    result = client.chat.completions.create(
        model=MODEL_NAME,
        messages=USER,
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "Mode"}},
        logit_bias=_toward_more_properties(server),
        max_tokens=300,
        temperature=0.0,
    )
    [call] = result.choices[0].message.tool_calls
    jsonschema_rs.validate(CLOSED_SCHEMA, json.loads(call.function.arguments))


@pytest.mark.parametrize("server_closes", [True, False])
@pytest.mark.parametrize("request_says", [None, True, False])
def test_the_server_setting_applies_where_the_request_does_not_say(
    server_farm, server_closes, request_says
):
    ctx = server_farm.server(disable_additional_properties=server_closes).ctx
    given = StructuredOutputsParams(json=OPEN_SCHEMA, disable_additional_properties=request_says)
    applied = ctx.with_server_defaults(given)
    assert applied is not None
    expected = server_closes if request_says is None else request_says
    assert applied.closes_objects is expected
    assert ctx.with_server_defaults(None) is None
