"""Tool-call parsers of the OpenAI server: model text in, OpenAI ``tool_calls`` out.

``get_tool_parser(name, chat_template)`` gives a parser; ``parser.extract(text, tools)``
splits a finished generation into (content, calls) and ``parser.streamer(tools)`` gives a
state machine that turns text deltas into OpenAI chat-completion deltas.
"""

from vllm_tvm.server.tool_parsers.auto import detect_tool_parser
from vllm_tvm.server.tool_parsers.base import ToolCall, ToolCallStreamer, ToolParser
from vllm_tvm.server.tool_parsers.registry import get_tool_parser, tool_parser_names

__all__ = [
    "ToolCall",
    "ToolCallStreamer",
    "ToolParser",
    "detect_tool_parser",
    "get_tool_parser",
    "tool_parser_names",
]
