"""``qwen3``: ``<think>…</think>`` only when the model opened it.

Qwen3 writes ``<think>`` itself when thinking; with ``enable_thinking=False`` its template
puts an empty ``<think>\\n\\n</think>\\n\\n`` in the prompt and the output is all answer. So
reasoning exists only when the output starts with ``<think>``, and never when thinking is
disabled.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers.base import Opening, ReasoningParser


class Qwen3ReasoningParser(ReasoningParser):
    """``qwen3``: reasoning only after a leading ``<think>``."""

    name = "qwen3"
    open_tag = "<think>"
    close_tag = "</think>"

    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        return Opening.NO_REASONING if enable_thinking is False else Opening.MODEL_OPENS
