"""``auto``: tell the tool-call dialect from the chat template's text.

A chat template renders the assistant's past tool calls (and often instructs the model) in
exactly the format the model was trained to write, so the markers a template contains name
the dialect. The checks run from the most specific marker to the least: several unrelated
formats also use a ``<tool_call>`` tag (GLM's ``<arg_key>``, MiniMax's ``<invoke>``), so
Hermes is chosen only when a JSON object with a ``name`` key follows the tag. A template with
no known markers gets ``none``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# A JSON object with a "name" key shortly after <tool_call>, allowing for the Jinja quoting
# and expression breaks between them (but not another tag).
_HERMES_OBJECT = re.compile(r'<tool_call>[^<]{0,40}?\{\\?"name\\?"')


def _deepseek_v3(template: str) -> bool:
    return "<｜tool▁call▁begin｜>" in template and "<｜tool▁sep｜>" in template  # noqa: RUF001


def _mistral(template: str) -> bool:
    return "[TOOL_CALLS]" in template


def _qwen3_coder(template: str) -> bool:
    return all(m in template for m in ("<tool_call>", "<function=", "<parameter="))


def _pythonic(template: str) -> bool:
    markers = ("<|tool_call_start|>[", "<|python_start|>", "[func_name1(")
    return any(m in template for m in markers)


def _hermes(template: str) -> bool:
    return _HERMES_OBJECT.search(template) is not None


def _llama3_json(template: str) -> bool:
    return '"parameters": ' in template and "<|start_header_id|>" in template


_CHECKS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("deepseek_v3", _deepseek_v3),
    ("mistral", _mistral),
    ("qwen3_coder", _qwen3_coder),
    ("pythonic", _pythonic),
    ("hermes", _hermes),
    ("llama3_json", _llama3_json),
)


def detect_tool_parser(chat_template: str) -> str:
    """The name of the tool-call parser for the dialect ``chat_template`` renders, or
    ``"none"`` when it renders no dialect the parsers read."""
    for name, renders in _CHECKS:
        if renders(chat_template):
            return name
    return "none"
