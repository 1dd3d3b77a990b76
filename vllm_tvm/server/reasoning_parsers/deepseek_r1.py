"""``deepseek_r1``: ``<think>…</think>`` where the prompt may already have opened the tag.

DeepSeek R1 and its distills think first, always; their chat templates end the prompt with
``<think>\\n``, so the output often starts inside the reasoning and only ``</think>`` appears.
Everything before ``</think>`` is reasoning (all of it, if the generation stopped before the
tag); an opening tag the model writes anyway is skipped.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers.base import Opening, ReasoningParser


class DeepSeekR1ReasoningParser(ReasoningParser):
    """``deepseek_r1``: reasoning from the start up to ``</think>``."""

    name = "deepseek_r1"
    open_tag = "<think>"
    close_tag = "</think>"

    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        return Opening.NO_REASONING if enable_thinking is False else Opening.OPENED
