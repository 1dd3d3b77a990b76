"""Tool-call parsers by the names vLLM's ``--tool-call-parser`` accepts.

One place maps a name to its dialect, so the CLI, the server and the error message for a bad
name all list the same choices. ``auto`` resolves to a dialect from the chat template.
"""

from __future__ import annotations

from vllm_tvm.server.tool_parsers.auto import detect_tool_parser
from vllm_tvm.server.tool_parsers.base import ToolParser
from vllm_tvm.server.tool_parsers.deepseek_v3 import DeepSeekV3ToolParser
from vllm_tvm.server.tool_parsers.hermes import HermesToolParser
from vllm_tvm.server.tool_parsers.llama3_json import Llama3JsonToolParser
from vllm_tvm.server.tool_parsers.mistral import MistralToolParser
from vllm_tvm.server.tool_parsers.none import NoneToolParser
from vllm_tvm.server.tool_parsers.pythonic import PythonicToolParser
from vllm_tvm.server.tool_parsers.qwen3_coder import Qwen3CoderToolParser

AUTO = "auto"
_PARSERS: dict[str, type[ToolParser]] = {
    parser.name: parser
    for parser in (
        DeepSeekV3ToolParser,
        HermesToolParser,
        Llama3JsonToolParser,
        MistralToolParser,
        NoneToolParser,
        PythonicToolParser,
        Qwen3CoderToolParser,
    )
}


def tool_parser_names() -> list[str]:
    """Every accepted parser name, ``auto`` included, sorted."""
    return sorted([*_PARSERS, AUTO])


def get_tool_parser(name: str, chat_template: str | None = None) -> ToolParser:
    """The parser called ``name``; for ``auto``, the one ``chat_template`` calls for.

    Raises ``ValueError`` naming the bad value and the accepted ones.
    """
    if name == AUTO:
        if chat_template is None:
            raise ValueError(
                f"tool-call parser {AUTO!r} needs the model's chat template and there is none;"
                f" name a parser instead: {', '.join(sorted(_PARSERS))}"
            )
        name = detect_tool_parser(chat_template)
    parser = _PARSERS.get(name)
    if parser is None:
        raise ValueError(
            f"unknown tool-call parser {name!r}; supported: {', '.join(tool_parser_names())}"
        )
    return parser()
