"""``auto``: tell the reasoning convention from the chat template's text.

A template that renders reasoning shows its tags: ``[THINK]`` is Mistral's, a ``to=self``
message MuseGlimmer's, and ``<think>`` everyone else's. Among the ``<think>`` families the
difference is who opens the tag, which ``think_auto`` reads from each request's rendered
prompt, so ``<think>`` templates get ``think_auto`` (MiniMax-M2's, recognised by its
``]~b]`` role marker, gets ``minimax_m2``). A template with no reasoning tags gets ``none``.
"""

from __future__ import annotations

NONE = "none"
_CHECKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mistral", ("[THINK]",)),
    ("muse_glimmer", ("to=self", "<|message|>")),
    ("minimax_m2", ("<think>", "]~b]")),
    ("think_auto", ("<think>",)),
)


def detect_reasoning_parser(chat_template: str) -> str:
    """The reasoning parser name for the tags ``chat_template`` renders, or ``"none"``."""
    for name, markers in _CHECKS:
        if all(marker in chat_template for marker in markers):
            return name
    return NONE
