"""Chat messages -> the dicts a chat template reads, for every content shape the OpenAI API
allows; the server's requests and `LLM.chat` both go through it.

Why it exists: clients send one message in several shapes, and templates read only one. An
assistant turn that called tools comes with `content: null` (LangChain always, the openai
SDK's `model_dump(exclude_none=True)` by leaving the key out) and templates concatenate
`message['content']`, so null and absent content become the empty string, as vLLM renders
them. A list of content parts becomes its texts joined by newlines (how vLLM feeds
string-content templates): `text` parts (and the Responses API's `input_text` /
`output_text`) by their `text`, `refusal` parts by their `refusal`. A part this text-only
runtime cannot show the model (an image, audio, a file) is refused by name
(`UnsupportedContentError`, a ValueError). Keys the client
sent as null (`tool_calls`, `name`, ...) are dropped, so a template testing
`'tool_calls' in message` sees what the client meant. Tool-call arguments arrive as JSON
text and templates expect objects, so they are decoded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

TEXT_PART_FIELDS = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
}
"""Content part type -> the field holding its text."""


class UnsupportedContentError(ValueError):
    """A message's content part that is not text (named, with what is accepted)."""


def _part_text(index: int, part: object) -> str:
    kind = part.get("type") if isinstance(part, Mapping) else None
    field = TEXT_PART_FIELDS.get(kind) if isinstance(kind, str) else None
    text = part.get(field) if field is not None and isinstance(part, Mapping) else None
    if not isinstance(text, str):
        supported = ", ".join(repr(name) for name in TEXT_PART_FIELDS)
        raise UnsupportedContentError(
            f"messages[{index}]: unsupported content part {kind!r}; supported: {supported}"
        )
    return text


def template_content(index: int, content: object) -> str:
    """The text of message `index`'s content: null or absent -> "", parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(_part_text(index, part) for part in content)  # type: ignore[union-attr]


def _template_tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool calls with their JSON-text arguments decoded, as chat templates expect."""
    result = []
    for call in calls:
        call = dict(call)
        function = call.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("arguments"), str):
            try:
                arguments = json.loads(function["arguments"])
            except json.JSONDecodeError:
                arguments = None
            if isinstance(arguments, dict):
                call["function"] = {**function, "arguments": arguments}
        result.append(call)
    return result


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the dicts a chat template reads (see the module docstring)."""
    result = []
    for index, message in enumerate(messages):
        item = {key: value for key, value in message.items() if value is not None}
        item["content"] = template_content(index, message.get("content"))
        if item.get("tool_calls"):
            item["tool_calls"] = _template_tool_calls(item["tool_calls"])
        result.append(item)
    return result
