"""Real chat templates rendered the way transformers renders them, for the parser tests.

The tool and reasoning parsers must read back exactly what a model was trained to emit, and
the chat template is the best public record of that format: rendering an assistant message
with tool calls through the real template gives the text the model generates for those calls.
The templates come from the llama-cpp-python sdist that tests/data/fetch_tokenizer_material.sh
unpacks into $VLLM_TVM_TEST_DATA; tests that need them skip when it has not run.

Templates are compiled by the runtime's ``compile_chat_template``, whose environment mirrors
transformers' (sandboxed, trim_blocks, lstrip_blocks, loop controls, a non-escaping ``tojson``,
``raise_exception``, ``strftime_now`` and the ``{% generation %}`` block) and is checked
against transformers in test_tokenization_chat_template.py; the messages are passed as given,
so the rendering is the one HF users get.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from vllm_tvm.runtime.tokenization.chat_template import compile_chat_template


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


def render(template: str, messages: list[dict[str, Any]], **variables: Any) -> str:
    """Render a chat template over ``messages`` with extra template variables."""
    return compile_chat_template(template).render(messages=messages, **variables)


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
