"""Tools, calls and helpers shared by the tool-parser tests.

A ``Case`` is one real chat template rendering an assistant turn with known calls; the
helpers render it, parse it back, and rebuild a stream of deltas into the same shape as the
non-streaming result, checking the OpenAI delta shape on the way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from parser_streams import SPLITS, Delta, random_pieces, stream
from tool_parser_templates import assistant_turn, load_template

from vllm_tvm.server.reasoning_parsers import get_reasoning_parser
from vllm_tvm.server.tool_parsers import ToolParser

# ---------------------------------------------------------------------------- tools and calls

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
                    "units": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Units.",
                    },
                    "exact": {"type": "boolean", "description": "Exact match."},
                    "ratio": {"type": "number", "description": "A ratio."},
                    "note": {"type": ["string", "null"], "description": "A note."},
                    "filters": {"type": "object", "description": "Filters."},
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

# Hermes' templates turn each parameter type into a Python type name and recurse forever on
# a list of types, so they are shown this simpler schema (only the prompt uses it).
SIMPLE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "A tool.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name."}},
            },
        },
    }
    for name in ("get_weather", "write_file")
]
HERMES = {"tools": SIMPLE_TOOLS}

# Plain values every template can render and read back.
WEATHER = ("get_weather", {"city": "Paris", "days": 3})
# Nested JSON, unicode, quotes, braces, backslashes and newlines inside strings.
RICH = (
    "get_weather",
    {
        "city": 'Zürich "old town" {x} [y] \\ 東京',
        "units": ["c", "f"],
        "exact": True,
        "ratio": 0.25,
        "note": None,
        "filters": {"lang": "de", "said": 'a "}" b', "nested": {"deep": [1, 2, {"k": False}]}},
    },
)
FILE = ("write_file", {"path": "src/a.py", "body": "def f():\n    return '}'\n"})
# What a single-quoted pythonic rendering can carry (no quotes, backslashes or newlines).
PYTHONIC = (
    "get_weather",
    {
        "city": "Paris",
        "days": 3,
        "units": ["c", "f"],
        "exact": True,
        "ratio": 0.5,
        "note": None,
        "filters": {"lang": "fr", "strict": False},
    },
)
CONTENT = "Let me look that up."


@dataclass(frozen=True)
class Case:
    """One template rendering an assistant turn with calls, and how to cut it out."""

    template: str
    dialect: str
    header: str
    end: str
    calls: tuple[tuple[str, dict[str, Any]], ...]
    content: str | None = None
    arguments_as_text: bool = False
    with_tools: bool = True
    reasoning_parser: str | None = None
    keep_none_content: bool = False
    variables: dict[str, Any] = field(default_factory=dict)
    detected: str | None = None
    prefix_stride: int = 2

    @property
    def auto(self) -> str:
        """The name ``auto`` gives for the template (the dialect, unless it reads under
        another of its names)."""
        return self.detected or self.dialect

    @property
    def id(self) -> str:
        return f"{self.template}-{len(self.calls)}"


IM = ("<|im_start|>assistant\n", "<|im_end|>\n")
DEEPSEEK_ASSISTANT = "<｜Assistant｜>"  # noqa: RUF001
DEEPSEEK_EOS = "<｜end▁of▁sentence｜>"  # noqa: RUF001
MISTRAL = {"bos_token": "<s>", "eos_token": "</s>"}
LLAMA = ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>")


def conversation(case: Case) -> list[dict[str, Any]]:
    tool_calls = [
        {
            "id": f"call{index:05d}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": json.dumps(arguments) if case.arguments_as_text else arguments,
            },
        }
        for index, (name, arguments) in enumerate(case.calls)
    ]
    assistant: dict[str, Any] = {"role": "assistant", "tool_calls": tool_calls}
    # apply_chat_template drops None values; vLLM passes them, which the R1 templates need.
    if case.content is not None or case.keep_none_content:
        assistant["content"] = case.content
    return [{"role": "user", "content": "What is the weather in Paris?"}, assistant]


def rendered_turn(case: Case) -> str:
    """What the model emits for the case's calls, per its real chat template."""
    template = load_template(case.template)
    variables = {"tools": TOOLS if case.with_tools else None, "date_string": "26 Jul 2024"}
    variables.update(case.variables)
    return assistant_turn(
        template, conversation(case), header=case.header, end=case.end, **variables
    )


def tool_text(case: Case) -> str:
    """The text the tool parser sees: the turn, less reasoning where the template has some."""
    text = rendered_turn(case)
    if case.reasoning_parser is None:
        return text
    _reasoning, content = get_reasoning_parser(case.reasoning_parser).extract(text)
    return content or ""


# --------------------------------------------------------------------------------- helpers


def calls_of(parser: ToolParser, text: str) -> tuple[str | None, list[tuple[str, Any]]]:
    """Non-streaming result as (content, [(name, decoded arguments)])."""
    content, calls = parser.extract(text, TOOLS)
    return content, [(call.name, json.loads(call.arguments)) for call in calls]


def rebuild(deltas: list[Delta]) -> tuple[str | None, list[tuple[str, str, str]]]:
    """Content and [(id, name, arguments text)] from streamed deltas, checking their shape."""
    content: list[str] = []
    calls: list[list[str]] = []
    for delta in deltas:
        assert set(delta) in ({"content"}, {"tool_calls"}), delta
        if "content" in delta:
            assert not calls, f"content {delta['content']!r} streamed after a tool call"
            content.append(delta["content"])
            continue
        [entry] = delta["tool_calls"]
        if "id" in entry:
            assert entry["index"] == len(calls)
            assert entry["type"] == "function"
            assert set(entry["function"]) == {"name"}
            calls.append([entry["id"], entry["function"]["name"], ""])
        else:
            assert set(entry) == {"index", "function"}
            assert entry["index"] == len(calls) - 1
            calls[-1][2] += entry["function"]["arguments"]
    return ("".join(content) or None), [(i, n, a) for i, n, a in calls]


def streamed(parser: ToolParser, text: str, seed: int, longest: int) -> list[Delta]:
    streamer = parser.streamer(TOOLS)
    return stream(streamer.feed, streamer.finish, random_pieces(text, seed, longest))


def assert_stream_matches_extract(parser: ToolParser, text: str) -> None:
    content, calls = parser.extract(text, TOOLS)
    expected = [(call.name, call.arguments) for call in calls]
    for seed, longest in SPLITS:
        got_content, got_calls = rebuild(streamed(parser, text, seed, longest))
        assert got_content == content, (seed, longest)
        assert [(name, args) for _id, name, args in got_calls] == expected, (seed, longest)
