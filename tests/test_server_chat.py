"""POST /v1/chat/completions through the real openai client against a live server.

Specification: the prompt is the chat template's rendering of the messages (tools included);
streaming yields what the JSON response holds, with usage when asked; each tool-call parser
reads back, whole and streamed, the calls that its dialect's real chat template renders for
an assistant turn; a reasoning parser splits reasoning_content from content; a named or
`required` tool choice and a json_schema response_format produce output valid for their
schemas.

The tiny model's own output is noise, so where a test needs a particular text the request
forces it with a structured-output choice constraint (the same path response_format uses):
the model then generates exactly that text and stops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx
import jsonschema_rs
import openai
import pytest
from server_helpers import MODEL_NAME
from tool_parser_templates import assistant_turn, load_template

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0.0}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name."},
                    "days": {"type": "integer", "description": "Days ahead."},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Where."},
                    "body": {"type": "string", "description": "What."},
                },
                "required": ["path", "body"],
            },
        },
    },
]
CALLS = [
    ("get_weather", {"city": "Paris", "days": 3}),
    ("write_file", {"path": "a.py", "body": "x"}),
]


def force(text: str) -> dict[str, Any]:
    """Extra body fields that make the model generate exactly `text`."""
    return {"structured_outputs": {"choice": [text]}}


def test_plain_chat_answers_as_the_assistant(client, server):
    result = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=5)
    [choice] = result.choices
    assert result.object == "chat.completion"
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    tokens = httpx.post(server.url + "/tokenize", json={"messages": USER}).json()
    assert result.usage.prompt_tokens == tokens["count"]


def test_max_completion_tokens_takes_precedence(client):
    result = client.chat.completions.create(
        model=MODEL_NAME,
        messages=USER,
        max_tokens=2,
        max_completion_tokens=7,
        extra_body={"ignore_eos": True},
    )
    assert result.usage.completion_tokens == 7


def test_stream_with_usage_matches_the_json_reply(client):
    args = {"model": MODEL_NAME, "messages": USER, "max_tokens": 12, **GREEDY}
    whole = client.chat.completions.create(**args)
    chunks = list(
        client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args)
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_stream_without_usage_sends_no_usage(client):
    chunks = list(
        client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=3, stream=True)
    )
    assert all(c.usage is None for c in chunks)


def test_chat_logprobs_list_top_alternatives(client):
    result = client.chat.completions.create(
        model=MODEL_NAME, messages=USER, max_tokens=4, logprobs=True, top_logprobs=3, **GREEDY
    )
    content = result.choices[0].logprobs.content
    assert len(content) == 4
    for entry in content:
        assert len(entry.top_logprobs) == 3
        assert entry.logprob == max(t.logprob for t in entry.top_logprobs)  # greedy: the best


def test_top_logprobs_without_logprobs_is_a_400(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_NAME, messages=USER, top_logprobs=2)


def test_n_2_gives_two_choices(client):
    result = client.chat.completions.create(
        model=MODEL_NAME, messages=USER, max_tokens=4, n=2, seed=1
    )
    assert sorted(c.index for c in result.choices) == [0, 1]


def test_tools_reach_the_chat_template(server_farm):
    server = server_farm.server(trust_request_chat_template=True)
    template = "{% for t in tools %}{{ t['function']['name'] }};{% endfor %}"
    body = {"messages": USER, "tools": TOOLS, "chat_template": template}
    tokens = httpx.post(server.url + "/tokenize", json=body).json()
    back = httpx.post(server.url + "/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert back["prompt"] == "get_weather;write_file;"


# ------------------------------------------------------------------------ tool-call dialects


@dataclass(frozen=True)
class Dialect:
    """A parser and a real template that renders its format."""

    parser: str
    template: str
    header: str
    end: str
    content: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)


IM = ("<|im_start|>assistant\n", "<|im_end|>\n")
DIALECTS = [
    Dialect("hermes", "Qwen-Qwen2.5-7B-Instruct", *IM, content="Let me check."),
    Dialect(
        "llama3_json",
        "meta-llama-Llama-3.2-3B-Instruct",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
    ),
    Dialect(
        "mistral",
        "mistralai-Mistral-Nemo-Instruct-2407",
        "[/INST]",
        "</s>",
        variables={"bos_token": "<s>", "eos_token": "</s>"},
    ),
    Dialect("pythonic", "LFM2.5-8B-A1B", *IM, content="Let me check."),
    Dialect("qwen3_coder", "Qwen3-Coder", *IM, content="Let me check."),
    Dialect(
        "deepseek_v3",
        "deepseek-ai-DeepSeek-V3.1",
        "<｜Assistant｜><think></think>",  # noqa: RUF001
        "<｜end▁of▁sentence｜>",  # noqa: RUF001
        content="Let me check.",
    ),
    Dialect(
        "kimi_k2",
        "moonshotai-Kimi-K2",
        "<|im_assistant|>assistant<|im_middle|>",
        "<|im_end|>",
        content="Let me check.",
    ),
]


def dialect_turn(dialect: Dialect, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """The text the dialect's template renders for an assistant turn making `calls`."""
    tool_calls = [
        {"id": f"call{i:05d}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(calls)
    ]
    assistant: dict[str, Any] = {"role": "assistant", "tool_calls": tool_calls}
    if dialect.content is not None:
        assistant["content"] = dialect.content
    return assistant_turn(
        load_template(dialect.template),
        [*USER, assistant],
        header=dialect.header,
        end=dialect.end,
        tools=TOOLS,
        **dialect.variables,
    )


def _decoded(calls: list[Any]) -> list[tuple[str, Any]]:
    return [(call.function.name, json.loads(call.function.arguments)) for call in calls]


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.parser)
def test_tool_calls_are_parsed_from_each_dialect(server_farm, dialect):
    calls = CALLS[:1] if dialect.parser == "llama3_json" else CALLS
    text = dialect_turn(dialect, calls)
    client = server_farm.server(
        tool_call_parser=dialect.parser, trust_request_chat_template=True
    ).client()
    args = {
        "model": MODEL_NAME,
        "messages": USER,
        "tools": TOOLS,
        "extra_body": {**force(text), "chat_template": load_template(dialect.template)},
    }
    result = client.chat.completions.create(**args)
    message = result.choices[0].message
    assert _decoded(message.tool_calls) == calls
    assert (message.content or None) == dialect.content
    assert result.choices[0].finish_reason == "tool_calls"

    streamed: dict[int, dict[str, str]] = {}
    content = ""
    finish = None
    for chunk in client.chat.completions.create(stream=True, **args):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            entry = streamed.setdefault(call.index, {"name": "", "arguments": ""})
            if call.function.name:
                assert not entry["name"], "a call's name is sent once, first"
                entry["name"] = call.function.name
            entry["arguments"] += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    rebuilt = [(e["name"], json.loads(e["arguments"])) for _, e in sorted(streamed.items())]
    assert rebuilt == calls
    assert (content or None) == dialect.content
    assert finish == "tool_calls"


def test_tool_choice_none_leaves_calls_as_content(client):
    text = dialect_turn(DIALECTS[0], CALLS[:1])
    result = client.chat.completions.create(
        model=MODEL_NAME,
        messages=USER,
        tools=TOOLS,
        tool_choice="none",
        extra_body=force(text),
    )
    assert result.choices[0].message.tool_calls == []
    assert result.choices[0].message.content == text


# Bounded arguments: the tiny model's free text would never close an unbounded string.
MODE_TOOL = {
    "type": "function",
    "function": {
        "name": "set_mode",
        "description": "Set a mode.",
        "parameters": {
            "type": "object",
            "properties": {
                "mode": {"enum": ["fast", "slow"]},
                "level": {"type": "integer", "minimum": 1, "maximum": 5},
            },
            "required": ["mode", "level"],
            "additionalProperties": False,
        },
    },
}


def test_named_tool_choice_produces_valid_arguments(client):
    result = client.chat.completions.create(
        model=MODEL_NAME,
        messages=USER,
        tools=[*TOOLS, MODE_TOOL],
        tool_choice={"type": "function", "function": {"name": "set_mode"}},
        max_tokens=300,
        **GREEDY,
    )
    [call] = result.choices[0].message.tool_calls
    assert call.function.name == "set_mode"
    jsonschema_rs.validate(MODE_TOOL["function"]["parameters"], json.loads(call.function.arguments))


def test_named_tool_choice_streams_name_then_arguments(client):
    args = {
        "model": MODEL_NAME,
        "messages": USER,
        "tools": [MODE_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "set_mode"}},
        "max_tokens": 300,
        **GREEDY,
    }
    whole = client.chat.completions.create(**args).choices[0].message.tool_calls[0]
    deltas = [
        call
        for chunk in client.chat.completions.create(stream=True, **args)
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or []
    ]
    assert deltas[0].function.name == "set_mode" and deltas[0].id
    assert "".join(d.function.arguments or "" for d in deltas) == whole.function.arguments


def test_required_tool_choice_calls_a_listed_tool(client):
    result = client.chat.completions.create(
        model=MODEL_NAME,
        messages=USER,
        tools=[MODE_TOOL],
        tool_choice="required",
        max_tokens=300,
        **GREEDY,
    )
    calls = result.choices[0].message.tool_calls
    assert calls and all(call.function.name == "set_mode" for call in calls)
    for call in calls:
        jsonschema_rs.validate(
            MODE_TOOL["function"]["parameters"], json.loads(call.function.arguments)
        )
    assert result.choices[0].finish_reason == "tool_calls"


def test_named_tool_choice_outside_tools_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL_NAME,
            messages=USER,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "launch"}},
        )
    assert "launch" in caught.value.body["message"]


# --------------------------------------------------------------------------------- reasoning


REASONED = "<think>Two and two make four.</think>The answer is 4."


def test_reasoning_is_split_from_the_answer(server_farm):
    client = server_farm.server(reasoning_parser="deepseek_r1").client()
    result = client.chat.completions.create(
        model=MODEL_NAME, messages=USER, extra_body=force(REASONED)
    )
    message = result.choices[0].message
    assert message.reasoning_content == "Two and two make four."
    assert message.content == "The answer is 4."


def test_reasoning_streams_as_reasoning_content_deltas(server_farm):
    client = server_farm.server(reasoning_parser="deepseek_r1").client()
    reasoning, content = "", ""
    for chunk in client.chat.completions.create(
        model=MODEL_NAME, messages=USER, stream=True, extra_body=force(REASONED)
    ):
        delta = chunk.choices[0].delta
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
    assert (reasoning, content) == ("Two and two make four.", "The answer is 4.")


# ------------------------------------------------------------------------- structured output


SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"enum": ["yes", "no"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["answer", "count"],
    "additionalProperties": False,
}


def test_json_schema_response_format_validates(client, server):
    assert server.ctx.vocab_size > server.ctx.tokenizer.vocab_size  # padded: masked too
    result = client.chat.completions.create(
        model=MODEL_NAME,
        messages=USER,
        max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
        **GREEDY,
    )
    assert result.choices[0].finish_reason == "stop"
    jsonschema_rs.validate(SCHEMA, json.loads(result.choices[0].message.content))


def test_json_object_response_format_gives_an_object(client):
    result = client.chat.completions.create(
        model=MODEL_NAME,
        messages=USER,
        max_tokens=300,
        response_format={"type": "json_object"},
        **GREEDY,
    )
    assert result.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(result.choices[0].message.content), dict)


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        ("guided_regex", "[a-c]{3}-[0-9]{2}", lambda t: len(t) == 6 and t[3] == "-"),
        ("guided_choice", ["red", "green"], lambda t: t in ("red", "green")),
        ("guided_grammar", 'root ::= "ab" ("c" | "d")', lambda t: t in ("abc", "abd")),
    ],
)
def test_guided_fields_constrain_the_output(client, field, value, check):
    result = client.completions.create(
        model=MODEL_NAME, prompt="Hello", max_tokens=40, extra_body={field: value}
    )
    assert check(result.choices[0].text), result.choices[0].text
