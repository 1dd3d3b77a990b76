"""Reasoning parsers by the names ``--reasoning-parser`` accepts.

One place maps a name to its convention, so the CLI, the server and the error message for a
bad name all list the same choices.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers.base import ReasoningParser
from vllm_tvm.server.reasoning_parsers.deepseek_r1 import DeepSeekR1ReasoningParser
from vllm_tvm.server.reasoning_parsers.mistral import MistralReasoningParser
from vllm_tvm.server.reasoning_parsers.qwen3 import Qwen3ReasoningParser
from vllm_tvm.server.reasoning_parsers.think_auto import ThinkAutoReasoningParser

_PARSERS: dict[str, type[ReasoningParser]] = {
    parser.name: parser
    for parser in (
        DeepSeekR1ReasoningParser,
        MistralReasoningParser,
        Qwen3ReasoningParser,
        ThinkAutoReasoningParser,
    )
}


def reasoning_parser_names() -> list[str]:
    """Every accepted reasoning parser name, sorted."""
    return sorted(_PARSERS)


def get_reasoning_parser(name: str) -> ReasoningParser:
    """The reasoning parser called ``name``; ``ValueError`` naming the accepted ones if none."""
    parser = _PARSERS.get(name)
    if parser is None:
        raise ValueError(
            f"unknown reasoning parser {name!r}; supported: {', '.join(reasoning_parser_names())}"
        )
    return parser()
