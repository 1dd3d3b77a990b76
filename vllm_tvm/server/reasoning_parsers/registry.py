"""Reasoning parsers by the names ``--reasoning-parser`` accepts.

One place maps a name to its convention, so the CLI, the server and the error message for a
bad name all list the same choices. ``none`` (no parser) and ``auto`` (the parser the chat
template calls for, possibly none) are resolved by ``reasoning_parser_for``.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers import think_families as think
from vllm_tvm.server.reasoning_parsers.auto import NONE, detect_reasoning_parser
from vllm_tvm.server.reasoning_parsers.base import ReasoningParser
from vllm_tvm.server.reasoning_parsers.deepseek_r1 import DeepSeekR1ReasoningParser
from vllm_tvm.server.reasoning_parsers.minimax_append_think import (
    MiniMaxM2AppendThinkReasoningParser,
)
from vllm_tvm.server.reasoning_parsers.mistral import MistralReasoningParser
from vllm_tvm.server.reasoning_parsers.muse_glimmer import MuseGlimmerReasoningParser
from vllm_tvm.server.reasoning_parsers.qwen3 import Qwen3ReasoningParser
from vllm_tvm.server.reasoning_parsers.think_auto import ThinkAutoReasoningParser

AUTO = "auto"
_PARSERS: dict[str, type[ReasoningParser]] = {
    parser.name: parser
    for parser in (
        DeepSeekR1ReasoningParser,
        think.DeepSeekV3ReasoningParser,
        think.Holo2ReasoningParser,
        think.MiniMaxM2ReasoningParser,
        MiniMaxM2AppendThinkReasoningParser,
        MistralReasoningParser,
        MuseGlimmerReasoningParser,
        think.Olmo3ReasoningParser,
        Qwen3ReasoningParser,
        think.Step3ReasoningParser,
        ThinkAutoReasoningParser,
    )
}


def reasoning_parser_names() -> list[str]:
    """Every reasoning parser's name, sorted (``auto`` and ``none`` aside)."""
    return sorted(_PARSERS)


def reasoning_parser_choices() -> list[str]:
    """Every value ``--reasoning-parser`` accepts: ``none``, ``auto`` and the parsers."""
    return [NONE, AUTO, *reasoning_parser_names()]


def get_reasoning_parser(name: str) -> ReasoningParser:
    """The reasoning parser called ``name``; ``ValueError`` naming the accepted ones if none."""
    parser = _PARSERS.get(name)
    if parser is None:
        raise ValueError(
            f"unknown reasoning parser {name!r}; supported: {', '.join(reasoning_parser_choices())}"
        )
    return parser()


def reasoning_parser_for(name: str | None, chat_template: str | None) -> ReasoningParser | None:
    """The parser a server started with ``--reasoning-parser name`` uses: None for ``none``
    (or no name), the template's own for ``auto`` (``ValueError`` without a template)."""
    if name == AUTO:
        if chat_template is None:
            raise ValueError(
                f"reasoning parser {AUTO!r} needs the model's chat template and there is none;"
                f" name a parser instead: {', '.join(reasoning_parser_names())}"
            )
        name = detect_reasoning_parser(chat_template)
    if name is None or name == NONE:
        return None
    return get_reasoning_parser(name)
