"""``minimax_m2_append_think``: MiniMax-M2's reasoning kept in the content, tag and all.

MiniMax-M2 reads its earlier reasoning back from the assistant content (its template splits
the content at ``</think>``), so clients that send the history back unchanged want the
reasoning left in the content. The prompt already opened ``<think>``, so the output lacks it:
this parser puts ``<think>`` before the generation and reports it all as content, as vLLM's
parser of this name does. With thinking disabled the output is content as it is.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers.base import (
    CONTENT,
    Opening,
    ReasoningParser,
    Splitter,
    TagSplitter,
)


class AppendThinkSplitter:
    """Reports the generation as content, ``<think>`` first once any text has come."""

    def __init__(self, open_tag: str) -> None:
        self._open = open_tag
        self._sent = 0

    def advance(self, text: str, final: bool) -> list[tuple[str, str]]:
        if len(text) == self._sent:
            return []
        piece = text[self._sent :]
        if self._sent == 0:
            piece = self._open + piece
        self._sent = len(text)
        return [(CONTENT, piece)]


class MiniMaxM2AppendThinkReasoningParser(ReasoningParser):
    """``minimax_m2_append_think``: everything is content, after an added ``<think>``."""

    name = "minimax_m2_append_think"
    open_tag = "<think>"
    close_tag = "</think>"

    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        return Opening.NO_REASONING if enable_thinking is False else Opening.OPENED

    def _splitter(self, prompt: str | None, enable_thinking: bool | None) -> Splitter:
        if self.opening(prompt, enable_thinking) is Opening.NO_REASONING:
            return TagSplitter(self.open_tag, self.close_tag, Opening.NO_REASONING)
        return AppendThinkSplitter(self.open_tag)
