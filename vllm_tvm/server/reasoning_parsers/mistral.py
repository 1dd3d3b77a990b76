"""``mistral``: ``[THINK]…[/THINK]`` of Magistral and Ministral reasoning models.

Mistral's reasoning models open ``[THINK]`` themselves (their system prompt asks for it), so
reasoning exists only when the output starts with ``[THINK]``.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers.base import Opening, ReasoningParser


class MistralReasoningParser(ReasoningParser):
    """``mistral``: reasoning only after a leading ``[THINK]``."""

    name = "mistral"
    open_tag = "[THINK]"
    close_tag = "[/THINK]"

    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        return Opening.NO_REASONING if enable_thinking is False else Opening.MODEL_OPENS
