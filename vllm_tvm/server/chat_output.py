"""A chat choice's generated text -> the assistant message: reasoning, content, tool calls.

Why it exists: what the model writes is one text, but the client expects it split —
`reasoning_content` (the reasoning parser), `content` and `tool_calls` (the tool-call
parser, fed only the content the reasoning parser lets through). The split runs in two
modes that must agree: on the whole text for a JSON response, and delta by delta for a
stream. A forced tool choice (`required` or a named function) needs no parser: the output
was constrained to the calls' JSON, which is read back here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm_tvm.runtime.structured_output import StructuredOutputsParams
from vllm_tvm.server.errors import APIError
from vllm_tvm.server.protocol import NamedToolChoice, Tool
from vllm_tvm.server.reasoning_parsers import ReasoningParser, ReasoningStreamer
from vllm_tvm.server.tool_parsers import ToolCall, ToolCallStreamer, ToolParser
from vllm_tvm.server.tool_parsers.base import make_tool_call_id

ToolChoice = str | NamedToolChoice


@dataclass
class ParsedMessage:
    """The assistant message read from a whole generation."""

    reasoning_content: str | None
    content: str | None
    tool_calls: list[ToolCall]


class ChoiceOutputParser:
    """Splits one choice's text into message parts, whole (`parse`) or streamed
    (`feed`/`finish`, which return OpenAI delta dicts)."""

    def __init__(
        self,
        reasoning: ReasoningParser | None,
        tool_parser: ToolParser | None,
        tools: list[dict[str, Any]] | None,
        prompt: str,
        enable_thinking: bool | None,
    ) -> None:
        self._reasoning_parser = reasoning
        self._tool_parser = tool_parser
        self._tools = tools
        self._prompt = prompt
        self._enable_thinking = enable_thinking
        self._reasoning: ReasoningStreamer | None = (
            reasoning.streamer(prompt=prompt, enable_thinking=enable_thinking)
            if reasoning
            else None
        )
        self._calls: ToolCallStreamer | None = tool_parser.streamer(tools) if tool_parser else None
        self.called_tools = False

    def parse(self, text: str) -> ParsedMessage:
        """The message parts of a finished generation."""
        reasoning, content = None, text
        if self._reasoning_parser is not None:
            reasoning, content = self._reasoning_parser.extract(
                text, prompt=self._prompt, enable_thinking=self._enable_thinking
            )
        calls: list[ToolCall] = []
        if self._tool_parser is not None and content:
            content, calls = self._tool_parser.extract(content, self._tools)
        return ParsedMessage(reasoning, content, calls)

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Deltas for the next piece of generated text."""
        if not text:
            return []
        pieces = self._reasoning.feed(text) if self._reasoning else [{"content": text}]
        return self._route(pieces)

    def finish(self) -> list[dict[str, Any]]:
        """Deltas for everything the parsers still hold back."""
        deltas = self._route(self._reasoning.finish()) if self._reasoning else []
        if self._calls is not None:
            deltas += self._note(self._calls.finish())
        return deltas

    def _route(self, pieces: list[dict[str, Any]]) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = []
        for piece in pieces:
            if "content" in piece and self._calls is not None:
                deltas += self._note(self._calls.feed(piece["content"]))
            else:
                deltas.append(piece)
        return deltas

    def _note(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if any("tool_calls" in d for d in deltas):
            self.called_tools = True
        return deltas


def _find_tool(tools: Sequence[Tool], name: str) -> Tool:
    for tool in tools:
        if tool.function.name == name:
            return tool
    available = ", ".join(t.function.name for t in tools)
    raise APIError(
        f"tool_choice names function {name!r}, which is not in tools; available: {available}",
        param="tool_choice",
    )


def _parameters(tool: Tool) -> dict[str, Any]:
    return tool.function.parameters or {"type": "object"}


def forced_tool_constraint(
    tool_choice: ToolChoice, tools: Sequence[Tool] | None
) -> StructuredOutputsParams | None:
    """The output constraint of a forced tool choice: a named function's arguments object,
    or for `required` a non-empty JSON array of {name, parameters} calls; None otherwise."""
    if tool_choice in ("none", "auto"):
        return None
    if not tools:
        raise APIError(
            f"tool_choice {_describe(tool_choice)} needs tools; none were given",
            param="tool_choice",
        )
    if isinstance(tool_choice, NamedToolChoice):
        return StructuredOutputsParams(
            json=_parameters(_find_tool(tools, tool_choice.function.name))
        )
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [tool.function.name]},
                "parameters": _parameters(tool),
            },
            "required": ["name", "parameters"],
        }
        for tool in tools
    ]
    return StructuredOutputsParams(json={"type": "array", "minItems": 1, "items": {"anyOf": calls}})


def _describe(tool_choice: ToolChoice) -> str:
    if isinstance(tool_choice, NamedToolChoice):
        return f"function {tool_choice.function.name!r}"
    return repr(tool_choice)


def forced_tool_calls(tool_choice: ToolChoice, text: str) -> list[ToolCall] | None:
    """The calls a forced tool choice produced; None when the text is not complete JSON
    (the generation was cut short), which is then returned as content."""
    if isinstance(tool_choice, NamedToolChoice):
        return [ToolCall(make_tool_call_id(), tool_choice.function.name, text)]
    try:
        items = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(items, list):
        return None
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        arguments = json.dumps(item.get("parameters", {}), ensure_ascii=False)
        calls.append(ToolCall(make_tool_call_id(), item["name"], arguments))
    return calls
