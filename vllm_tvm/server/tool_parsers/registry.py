"""Tool-call parsers by the names vLLM's ``--tool-call-parser`` accepts.

One place maps a name to its dialect, so the CLI, the server and the error message for a bad
name all list the same choices. Several names read one format (vLLM keeps a name per model
family even where families share a format); each maps to the reader of that format.
``auto`` resolves to a dialect from the chat template.
"""

from __future__ import annotations

from vllm_tvm.server.tool_parsers import json_tagged as tagged
from vllm_tvm.server.tool_parsers import xml_dialects as xml
from vllm_tvm.server.tool_parsers.auto import detect_tool_parser
from vllm_tvm.server.tool_parsers.base import DialectReader, ToolParser
from vllm_tvm.server.tool_parsers.deepseek_v3 import DeepSeekV3Reader, KimiK2Reader
from vllm_tvm.server.tool_parsers.gemma_calls import FunctionGemmaReader, GemmaCallReader
from vllm_tvm.server.tool_parsers.llama3_json import Llama3JsonReader
from vllm_tvm.server.tool_parsers.mistral import MistralToolParser
from vllm_tvm.server.tool_parsers.muse_glimmer import MuseGlimmerReader
from vllm_tvm.server.tool_parsers.none import PlainTextReader
from vllm_tvm.server.tool_parsers.pythonic import Olmo3Reader, PythonicReader

AUTO = "auto"
_READERS: dict[str, type[DialectReader]] = {
    "apertus": tagged.ApertusReader,
    "deepseek_v3": DeepSeekV3Reader,
    "deepseek_v31": DeepSeekV3Reader,
    "deepseek_v32": xml.DeepSeekV32Reader,
    "deepseek_v4": xml.DeepSeekV4Reader,
    "ernie45": tagged.HermesReader,
    "functiongemma": FunctionGemmaReader,
    "gemma4": GemmaCallReader,
    "gigachat3": tagged.GigaChat3Reader,
    "glm45": xml.GlmReader,
    "glm47": xml.GlmReader,
    "granite": tagged.GraniteReader,
    "granite-20b-fc": tagged.Granite20bFcReader,
    "granite4": tagged.HermesReader,
    "hermes": tagged.HermesReader,
    "hunyuan_a13b": tagged.ToolCallsListReader,
    "hy_v3": xml.HyV3Reader,
    "internlm": tagged.InternLmReader,
    "jamba": tagged.ToolCallsListReader,
    "kimi_k2": KimiK2Reader,
    "lfm2": PythonicReader,
    "llama3_json": Llama3JsonReader,
    "llama4_json": Llama3JsonReader,
    "llama4_pythonic": PythonicReader,
    "longcat": tagged.LongcatReader,
    "mimo": xml.Qwen3Reader,
    "minicpm5": xml.MiniCpm5Reader,
    "minimax_m2": xml.MiniMaxM2Reader,
    "muse_glimmer": MuseGlimmerReader,
    "none": PlainTextReader,
    "olmo3": Olmo3Reader,
    "phi4_mini_json": tagged.Phi4MiniJsonReader,
    "poolside_v1": xml.GlmReader,
    "pythonic": PythonicReader,
    "qwen3": xml.Qwen3Reader,
    "qwen3_coder": xml.Qwen3CoderReader,
    "qwen3_xml": xml.Qwen3CoderReader,
    "seed_oss": xml.SeedOssReader,
    "step3": xml.Step3Reader,
    "step3p5": xml.Qwen3CoderReader,
    "xlam": tagged.XlamReader,
}
# Dialects whose parser does more than read (Mistral's call ids).
_PARSERS: dict[str, type[ToolParser]] = {MistralToolParser.name: MistralToolParser}


def tool_parser_names() -> list[str]:
    """Every accepted parser name, ``auto`` included, sorted."""
    return sorted([*_READERS, *_PARSERS, AUTO])


def get_tool_parser(name: str, chat_template: str | None = None) -> ToolParser:
    """The parser called ``name``; for ``auto``, the one ``chat_template`` calls for.

    Raises ``ValueError`` naming the bad value and the accepted ones.
    """
    if name == AUTO:
        if chat_template is None:
            names = ", ".join(n for n in tool_parser_names() if n != AUTO)
            raise ValueError(
                f"tool-call parser {AUTO!r} needs the model's chat template and there is none;"
                f" name a parser instead: {names}"
            )
        name = detect_tool_parser(chat_template)
    if name in _PARSERS:
        return _PARSERS[name]()
    reader = _READERS.get(name)
    if reader is None:
        raise ValueError(
            f"unknown tool-call parser {name!r}; supported: {', '.join(tool_parser_names())}"
        )
    return ToolParser(name, reader)
