"""``none``: no tool-call parsing; the whole generation is content.

The parser for models whose chat template renders no tool calls, and for servers started
without tool support, so the server's code path is the same whether or not calls are read.
"""

from __future__ import annotations

from vllm_tvm.server.tool_parsers.base import DialectReader, State


class PlainTextReader(DialectReader):
    """Reports every piece of text as content as soon as it arrives."""

    def _initial_state(self) -> State:
        return self._in_content

    def _in_content(self, text: str, final: bool) -> bool:
        self._content(text[self.committed :])
        self.committed = len(text)
        return False
