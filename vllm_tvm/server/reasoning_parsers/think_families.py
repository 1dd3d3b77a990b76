"""The ``<think>…</think>`` conventions of the families vLLM names a reasoning parser after.

They differ only in who opens the tag, which ``Opening`` already names:

- ``holo2``, ``minimax_m2``, ``step3``: the chat template ends the prompt with ``<think>``
  (MiniMax-M2's writes ``<think>\\n`` after its assistant header) or the model starts inside
  its reasoning, so everything before ``</think>`` is reasoning, as for ``deepseek_r1``.
- ``deepseek_v3``: DeepSeek V3.1/V3.2 think only in thinking mode, where the template ends
  the prompt with ``<think>`` (and with ``</think>`` otherwise). Reasoning comes from the
  start when the request turned thinking on or the prompt opened the tag; otherwise only a
  ``<think>`` the model writes opens it.
- ``olmo3``: OLMo 3 Think's template opens ``<think>`` in the prompt; without that, text is
  reasoning only if a ``</think>`` follows it, as vLLM's parser reads it.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers.base import Opening, ReasoningParser
from vllm_tvm.server.reasoning_parsers.deepseek_r1 import DeepSeekR1ReasoningParser

THINK = "<think>"


class Holo2ReasoningParser(DeepSeekR1ReasoningParser):
    """``holo2``: reasoning from the start up to ``</think>``."""

    name = "holo2"


class MiniMaxM2ReasoningParser(DeepSeekR1ReasoningParser):
    """``minimax_m2``: reasoning from the start (the prompt opened it) up to ``</think>``."""

    name = "minimax_m2"


class Step3ReasoningParser(DeepSeekR1ReasoningParser):
    """``step3``: reasoning from the start up to ``</think>``."""

    name = "step3"


def _prompt_opened(prompt: str | None) -> bool:
    return prompt is not None and prompt.rstrip().endswith(THINK)


class DeepSeekV3ReasoningParser(ReasoningParser):
    """``deepseek_v3``: reasoning only in thinking mode (or after a ``<think>`` written)."""

    name = "deepseek_v3"
    open_tag = THINK
    close_tag = "</think>"

    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        if enable_thinking is False:
            return Opening.NO_REASONING
        if enable_thinking or _prompt_opened(prompt):
            return Opening.OPENED
        return Opening.MODEL_OPENS


class Olmo3ReasoningParser(ReasoningParser):
    """``olmo3``: reasoning opened by the prompt, or up to a ``</think>`` that comes."""

    name = "olmo3"
    open_tag = THINK
    close_tag = "</think>"

    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        if enable_thinking is False:
            return Opening.NO_REASONING
        return Opening.OPENED if _prompt_opened(prompt) else Opening.UNDECIDED
