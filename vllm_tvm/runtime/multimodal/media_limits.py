"""How many media items one prompt may carry: vLLM's `--limit-mm-per-prompt`, a JSON object
of modality -> count such as '{"image": 2}'.

Why it exists: each image is a vision-tower run and `tokens_per_image` prompt tokens, so a
deployment caps them; the count is checked before any image is fetched or decoded. A
modality left out keeps vLLM's default, DEFAULT_ITEMS_PER_PROMPT. Video and audio are
accepted as keys (a vLLM command line names them) though their parts stay refused."""

from __future__ import annotations

import json
from collections.abc import Mapping

MODALITIES = ("image", "video", "audio")

DEFAULT_ITEMS_PER_PROMPT = 999
"""vLLM's limit for a modality `--limit-mm-per-prompt` does not name."""


def parse_limit_mm_per_prompt(text: str) -> dict[str, int]:
    """The limits `text` (JSON) gives; ValueError naming the value when it is not accepted."""
    try:
        limits = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"must be a JSON object such as '{{\"image\": 2}}', got {text!r} ({error})"
        ) from None
    return checked_limits(limits, text)


def checked_limits(limits: object, shown: object = None) -> dict[str, int]:
    """`limits` as modality -> whole number; ValueError naming `shown` (or them) otherwise."""
    shown = limits if shown is None else shown
    if not isinstance(limits, Mapping):
        raise ValueError(f"must be a JSON object of modality -> count, got {shown!r}")
    checked = {}
    for modality, count in limits.items():
        if modality not in MODALITIES:
            raise ValueError(
                f"names modality {modality!r} in {shown!r}; accepted: {', '.join(MODALITIES)}"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(
                f"needs a whole number of 0 or more for {modality!r}, got {count!r} in {shown!r}"
            )
        checked[modality] = count
    return checked


def check_item_count(limits: Mapping[str, int], modality: str, count: int) -> None:
    """ValueError naming the limit when a prompt carries more `modality` items than allowed."""
    allowed = limits.get(modality, DEFAULT_ITEMS_PER_PROMPT)
    if count > allowed:
        raise ValueError(
            f"At most {allowed} {modality}(s) may be provided in one prompt; got {count} "
            f"(--limit-mm-per-prompt)"
        )
