"""Render a checkpoint's Jinja chat template exactly as HF transformers does.

Why our own renderer: the runtime must not import transformers, yet prompts must be
byte-identical to what `tokenizer.apply_chat_template(..., tokenize=False)` produces, since
models are trained on that text. The pieces of HF's behaviour that templates depend on:
- a sandboxed, immutable Jinja environment with `trim_blocks` and `lstrip_blocks`, the
  `loopcontrols` extension and a `{% generation %}` block tag (rendered as its body);
- a `tojson` filter that does not escape HTML and accepts `indent`, `separators`,
  `sort_keys` and `ensure_ascii`; globals `raise_exception` and `strftime_now`;
- the variables `messages`, `tools`, `documents`, `add_generation_prompt`, the special
  tokens (`bos_token`, `eos_token`, only when known) and any extra keyword (e.g.
  `enable_thinking`);
- message clean-up: keys whose value is None are dropped, and reasoning given under
  `reasoning_content`, `thinking` or `reasoning` is visible under the first two names.
Rendering runs under `template_limits`' bounds (time, output size), and any error the
template's code raises (a division by zero, unbounded recursion, a `range()` past the
sandbox's cap) is a `ChatTemplateError` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols

from vllm_tvm.runtime.tokenization.template_limits import (
    BoundedSandbox,
    bounded_join,
    render_deadline,
)

# Names a message's reasoning travels under; templates read the first two.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# Appended to the final message when continuing it, to find where that message ends.
_CONTINUE_MARK = "CONTINUE_FINAL_MESSAGE_TAG "


class ChatTemplateError(ValueError):
    """The template raised an error, failed to compile, or cannot render these inputs."""


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks;
    when rendering a prompt it is just its body."""

    tags = frozenset({"generation"})

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _TemplateDict:
    """`dict(...)` and `dict.fromkeys(...)` for templates, without exposing the type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """Jinja's `namespace()` that refuses underscore-prefixed attribute names."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # same signature trick as Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates cannot set underscore-prefixed namespace attributes, got {name!r}"
            )


@lru_cache(maxsize=32)
def compile_chat_template(template: str) -> jinja2.Template:
    """The compiled form of `template` (cached: servers render the same one repeatedly)."""
    env = BoundedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"chat template does not compile: {exc}") from exc


def _plain(value: Any) -> Any:
    """A copy of `value` made of JSON types only, so the sandbox sees no foreign methods."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


def _prepare_messages(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    prepared = []
    for message in messages:
        if callable(getattr(message, "model_dump", None)):
            message = message.model_dump()
        if not isinstance(message, Mapping):
            raise ChatTemplateError(f"chat messages must be mappings, got {message!r}")
        clean = {k: _plain(v) for k, v in message.items() if v is not None}
        reasoning = next((clean[k] for k in _REASONING_FIELDS if k in clean), None)
        if reasoning is not None:
            clean = {"thinking": reasoning, **clean, "reasoning_content": reasoning}
        prepared.append(clean)
    return prepared


def _mark_final_message(template: str, messages: list[dict[str, Any]]) -> str:
    """Append the continuation mark to the last message's text; returns that text."""
    if not messages:
        raise ChatTemplateError("continue_final_message needs at least one message")
    final = messages[-1]
    content = final.get("content")
    if content is None:
        raise ChatTemplateError("continue_final_message: the final message has no 'content'")
    if "content" not in template:
        raise ChatTemplateError("continue_final_message: the chat template never reads 'content'")
    if isinstance(content, (list, tuple)):
        for block in reversed(content):
            if isinstance(block, dict) and "text" in block:
                text = block["text"]
                block["text"] = text + _CONTINUE_MARK
                return text
        raise ChatTemplateError("continue_final_message: the final message has no text block")
    final["content"] = content + _CONTINUE_MARK
    return content


def _cut_after_final_message(rendered: str, final_text: str) -> str:
    mark = _CONTINUE_MARK.strip()
    if final_text.strip() not in rendered or mark not in rendered:
        raise ChatTemplateError(
            "continue_final_message: the chat template dropped part of the final message"
        )
    at = rendered.rindex(mark)
    if rendered[at : at + len(_CONTINUE_MARK)] == _CONTINUE_MARK:
        return rendered[:at]
    return rendered[:at].rstrip()


def render_chat_template(
    template: str,
    messages: list[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    tools: list[Mapping[str, Any]] | None = None,
    documents: list[Mapping[str, Any]] | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    continue_final_message: bool = False,
    **kwargs: Any,
) -> str:
    """The prompt text `template` makes of `messages`, as HF `apply_chat_template` would.

    `tools` are JSON-schema dicts; extra keyword arguments (such as `enable_thinking`) become
    template variables. With `continue_final_message`, the text stops right after the last
    message's content so the model continues it (incompatible with `add_generation_prompt`).
    Raises `ChatTemplateError` when the template calls `raise_exception`, fails to compile,
    fails while rendering or passes a render bound.
    """
    if continue_final_message and add_generation_prompt:
        raise ChatTemplateError(
            "continue_final_message and add_generation_prompt cannot both be set"
        )
    chat = _prepare_messages(messages)
    final_text = _mark_final_message(template, chat) if continue_final_message else None
    variables: dict[str, Any] = {}
    if bos_token is not None:
        variables["bos_token"] = bos_token
    if eos_token is not None:
        variables["eos_token"] = eos_token
    variables.update(_plain(kwargs))
    compiled = compile_chat_template(template)
    try:
        with render_deadline():
            rendered = bounded_join(
                compiled.generate(
                    messages=chat,
                    tools=_plain(tools),
                    documents=_plain(documents),
                    add_generation_prompt=add_generation_prompt,
                    **variables,
                )
            )
    except jinja2.exceptions.TemplateError as exc:
        raise ChatTemplateError(str(exc)) from exc
    except Exception as exc:  # the template's own code failed (1/0, recursion, range cap)
        raise ChatTemplateError(f"{type(exc).__name__}: {exc}") from exc
    if final_text is not None:
        rendered = _cut_after_final_message(rendered, final_text)
    return rendered
