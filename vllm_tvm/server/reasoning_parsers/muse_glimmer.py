"""``muse_glimmer``: the reasoning message of MuseGlimmer's ATEM channels.

MuseGlimmer writes its reasoning as a message addressed to itself before the answer or the
tool calls: the prompt ends with ``<|start|>assistant``, and the model goes on with
`` to=self<|message|>…reasoning…<|eom|>``. Reasoning exists only when the output opens that
message; what follows its ``<|eom|>`` is content: the answer's body (its ``to=user`` header
dropped), or the tool-call messages for the tool-call parser to read. The framing tokens
are special tokens, which the server keeps in the text whenever a parser reads it.
"""

from __future__ import annotations

from vllm_tvm.server.reasoning_parsers.base import Opening, ReasoningParser


class MuseGlimmerReasoningParser(ReasoningParser):
    """``muse_glimmer``: reasoning in a leading ``to=self<|message|>…<|eom|>`` message."""

    name = "muse_glimmer"
    open_tag = "to=self<|message|>"
    close_tag = "<|eom|>"
    answer_header = "<|start|>assistant to=user<|message|>"

    def opening(self, prompt: str | None, enable_thinking: bool | None) -> Opening:
        return Opening.NO_REASONING if enable_thinking is False else Opening.MODEL_OPENS
