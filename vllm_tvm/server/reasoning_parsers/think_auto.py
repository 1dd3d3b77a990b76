"""``think_auto``: ``<think>…</think>`` in whichever convention the request uses.

Models differ in who writes ``<think>``: the model (Qwen3, QwQ with an old template) or the
prompt (DeepSeek R1, QwQ, Qwen3 thinking-2507, Reka in thinking mode). Given the rendered
prompt, the parser knows: a prompt ending in ``<think>`` opened the reasoning, otherwise
only a leading ``<think>`` in the output does. Without the prompt it reads the output: a
leading ``<think>`` opens reasoning, and otherwise text counts as reasoning only if a
``</think>`` follows, which a stream can only learn by holding the text back until that tag
or the end, so servers should pass the prompt.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers.base import Opening, ReasoningParser


class ThinkAutoReasoningParser(ReasoningParser):
    """``think_auto``: the ``<think>`` convention the prompt (or the output) shows."""

    name = "think_auto"
    open_tag = "<think>"
    close_tag = "</think>"

    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        if enable_thinking is False:
            return Opening.NO_REASONING
        if prompt is None:
            return Opening.UNDECIDED
        if prompt.rstrip().endswith(self.open_tag):
            return Opening.OPENED
        return Opening.MODEL_OPENS
