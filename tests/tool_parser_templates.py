"""Real chat templates rendered the way transformers renders them, for the parser tests.

The tool and reasoning parsers must read back exactly what a model was trained to emit, and
the chat template is the best public record of that format: rendering an assistant message
with tool calls through the real template gives the text the model generates for those calls.
The templates come from the llama-cpp-python sdist that tests/data/fetch_tokenizer_material.sh
unpacks into $VLLM_TVM_TEST_DATA; tests that need them skip when it has not run.

The environment mirrors transformers' chat-template environment (sandboxed, trim_blocks,
lstrip_blocks, loop controls, a non-escaping ``tojson``, ``raise_exception``,
``strftime_now`` and the ``{% generation %}`` block), so the rendering is the one HF users get.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment


def templates_dir() -> Path:
    """Where fetch_tokenizer_material.sh puts llama.cpp's chat templates."""
    root = Path(os.environ.get("VLLM_TVM_TEST_DATA", Path.home() / ".cache/vllm_tvm_test_data"))
    return root / "llama_cpp" / "models" / "templates"


def template_names() -> list[str]:
    """Names (file stems) of every fetched template; empty when the material is absent."""
    directory = templates_dir()
    return sorted(p.stem for p in directory.glob("*.jinja")) if directory.is_dir() else []


def load_template(name: str) -> str:
    """The text of one real template, skipping the calling test when it was not fetched."""
    path = templates_dir() / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"{path} absent: run tests/data/fetch_tokenizer_material.sh")
    return path.read_text(encoding="utf-8")


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body unchanged."""

    tags = frozenset({"generation"})

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
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


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


_ENV = _environment()


def render(template: str, messages: list[dict[str, Any]], **variables: Any) -> str:
    """Render a chat template over ``messages`` with extra template variables."""
    return _ENV.from_string(template).render(messages=messages, **variables)


def assistant_turn(
    template: str,
    messages: list[dict[str, Any]],
    *,
    header: str,
    end: str,
    **variables: Any,
) -> str:
    """The text a model emits for the last (assistant) message of ``messages``.

    ``header`` is the assistant header the generation prompt ends with; the model's text is
    what the template renders after its last occurrence, less the end-of-turn ``end`` (the stop
    string, which the engine strips before the parsers see the text).
    """
    rendered = render(template, messages, add_generation_prompt=False, **variables)
    _before, found, turn = rendered.rpartition(header)
    assert found, f"assistant header {header!r} not in rendering"
    assert turn.endswith(end), f"assistant turn {turn!r} does not end with {end!r}"
    return turn[: len(turn) - len(end)]
