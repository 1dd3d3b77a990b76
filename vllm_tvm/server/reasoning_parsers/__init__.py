"""Reasoning parsers of the OpenAI server: a generation in, ``reasoning_content`` and
``content`` out.

``get_reasoning_parser(name)`` gives a parser; ``parser.extract(text)`` splits a finished
generation and ``parser.streamer()`` gives a state machine for text deltas. The content it
yields is what a tool-call parser reads next.
"""

from vllm_tvm.server.reasoning_parsers.auto import detect_reasoning_parser
from vllm_tvm.server.reasoning_parsers.base import Opening, ReasoningParser, ReasoningStreamer
from vllm_tvm.server.reasoning_parsers.registry import (
    get_reasoning_parser,
    reasoning_parser_choices,
    reasoning_parser_for,
    reasoning_parser_names,
)

__all__ = [
    "Opening",
    "ReasoningParser",
    "ReasoningStreamer",
    "detect_reasoning_parser",
    "get_reasoning_parser",
    "reasoning_parser_choices",
    "reasoning_parser_for",
    "reasoning_parser_names",
]
