"""Chat messages -> the dicts a chat template reads, for every content shape the OpenAI API
allows; the server's requests and `LLM.chat` both go through it.

Why it exists: clients send one message in several shapes, and templates read only one. An
assistant turn that called tools comes with `content: null` (LangChain always, the openai
SDK's `model_dump(exclude_none=True)` by leaving the key out) and templates concatenate
`message['content']`, so null and absent content become the empty string, as vLLM renders
them. A list of content parts becomes its texts joined by newlines (how vLLM feeds
string-content templates): `text` parts (and the Responses API's `input_text` /
`output_text`) by their `text`, `refusal` parts by their `refusal`. A part this text-only
runtime cannot show the model (audio, video, a file; an image unless the model has a vision
tower) is refused by name (`UnsupportedContentError`, a ValueError). For a model with a
vision tower, each `image_url` part becomes the model's image placeholder in the text (its
begin-of-image token, as vLLM's string content format does) and `image_urls` lists the
parts' URLs in prompt order, named for the errors of loading them. Keys the client
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


IMAGE_PART = "image_url"


def _part_text(index: int, part: object, image_placeholder: str | None) -> str:
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind == IMAGE_PART and image_placeholder is not None:
        return image_placeholder
    field = TEXT_PART_FIELDS.get(kind) if isinstance(kind, str) else None
    text = part.get(field) if field is not None and isinstance(part, Mapping) else None
    if not isinstance(text, str):
        accepted = [*TEXT_PART_FIELDS, *([IMAGE_PART] if image_placeholder else [])]
        supported = ", ".join(repr(name) for name in accepted)
        if kind == IMAGE_PART:
            supported += " (this model has no vision tower)"
        raise UnsupportedContentError(
            f"messages[{index}]: unsupported content part {kind!r}; supported: {supported}"
        )
    return text


def template_content(index: int, content: object, image_placeholder: str | None = None) -> str:
    """The text of message `index`'s content: null or absent -> "", parts joined by newlines
    (image parts as `image_placeholder`; None: refused)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(_part_text(index, part, image_placeholder) for part in content)  # type: ignore[union-attr]


def image_urls(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(`messages[i].content[j]`, its URL) of every `image_url` part, in prompt order (a
    part whose `image_url.url` is not a string is named with an empty URL)."""
    found = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part_index, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") == IMAGE_PART:
                image = part.get(IMAGE_PART)
                url = image.get("url") if isinstance(image, Mapping) else image
                name = f"messages[{index}].content[{part_index}]"
                found.append((name, url if isinstance(url, str) else ""))
    return found


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


def template_messages(
    messages: Sequence[Mapping[str, Any]], image_placeholder: str | None = None
) -> list[dict[str, Any]]:
    """Messages as the dicts a chat template reads (see the module docstring); image parts
    become `image_placeholder` (None: refused by name)."""
    result = []
    for index, message in enumerate(messages):
        item = {key: value for key, value in message.items() if value is not None}
        item["content"] = template_content(index, message.get("content"), image_placeholder)
        if item.get("tool_calls"):
            item["tool_calls"] = _template_tool_calls(item["tool_calls"])
        result.append(item)
    return result
