"""``auto``: tell the tool-call dialect from the chat template's text.

A chat template renders the assistant's past tool calls (and often instructs the model) in
exactly the format the model was trained to write, so the markers a template contains name
the dialect. The checks run from the most specific marker to the least: several unrelated
formats also use a ``<tool_call>`` tag (GLM's ``<arg_key>``, Qwen3-Coder's ``<function=``),
so Hermes is chosen only when a JSON object with a ``name`` key follows the tag. Where
several names read one format, the check gives one of them (``glm45`` for every
``<arg_key>`` template, ``deepseek_v3`` for V3 and V3.1, ``pythonic`` for LFM2). A template
with no known markers gets ``none``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# A JSON object with a "name" key shortly after <tool_call>, allowing for the Jinja quoting
# and expression breaks between them (but not another tag).
_HERMES_OBJECT = re.compile(r'<tool_call>[^<]{0,40}?\{\\?"name\\?"')
_DSML = "｜DSML｜"  # noqa: RUF001
_DEEPSEEK = ("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>")  # noqa: RUF001


def _all(*markers: str) -> Callable[[str], bool]:
    return lambda template: all(marker in template for marker in markers)


def _any(*markers: str) -> Callable[[str], bool]:
    return lambda template: any(marker in template for marker in markers)


def _gigachat3(template: str) -> bool:
    # GigaChat 3 builds its "function call<|role_sep|>" header from separate strings.
    return _all("function call", "<|role_sep|>")(template) or "<|function_call|>" in template


def _hermes(template: str) -> bool:
    return _HERMES_OBJECT.search(template) is not None


_CHECKS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("deepseek_v32", _all(_DSML, "function_calls")),
    ("deepseek_v4", _all(_DSML, "tool_calls")),
    ("deepseek_v3", _all(*_DEEPSEEK)),
    ("kimi_k2", _all("<|tool_calls_section_begin|>")),
    ("step3", _all("<steptml:invoke")),
    ("muse_glimmer", _all("<atem:invoke")),
    ("minimax_m2", _all("<minimax:tool_call>")),
    ("seed_oss", _all("<seed:tool_call>")),
    ("hy_v3", _any("<tool_sep{}>", "<tool_sep:opensource>")),
    ("glm45", _all("<tool_call>", "<arg_key>")),
    ("minicpm5", _all('<function name="', '<param name="')),
    ("gemma4", _all("<|tool_call>")),
    ("functiongemma", _all("<start_function_call>")),
    ("apertus", _all("<|tools_prefix|>")),
    ("gigachat3", _gigachat3),
    ("granite", _all("<|tool_call|>")),
    ("mistral", _all("[TOOL_CALLS]")),
    ("qwen3_coder", _all("<tool_call>", "<function=", "<parameter=")),
    ("olmo3", _all("<function_calls>")),
    ("pythonic", _any("<|tool_call_start|>[", "<|python_start|>", "[func_name1(")),
    ("longcat", _all("<longcat_tool_call>")),
    ("internlm", _all("<|action_start|><|plugin|>")),
    ("jamba", _all("<tool_calls>")),
    ("hermes", _hermes),
    ("phi4_mini_json", _all("functools[")),
    ("llama3_json", _all('"parameters": ', "<|start_header_id|>")),
)


def detect_tool_parser(chat_template: str) -> str:
    """The name of the tool-call parser for the dialect ``chat_template`` renders, or
    ``"none"`` when it renders no dialect the parsers read."""
    for name, renders in _CHECKS:
        if renders(chat_template):
            return name
    return "none"
