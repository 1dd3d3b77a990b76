"""Feeding a text to a streaming parser in random pieces, for the tool and reasoning parser
tests: the random splits are what a detokenizer produces, and every split of a text must
reconstruct what the non-streaming path returns."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

Delta = dict[str, Any]


def random_pieces(text: str, seed: int, longest: int) -> Iterator[str]:
    """``text`` cut into consecutive pieces of 1..``longest`` characters."""
    rng = random.Random(seed)
    pos = 0
    while pos < len(text):
        size = rng.randint(1, longest)
        yield text[pos : pos + size]
        pos += size


def stream(
    feed: Callable[[str], list[Delta]], finish: Callable[[], list[Delta]], pieces: Iterator[str]
) -> list[Delta]:
    """All deltas a streamer returns for ``pieces`` and its finish."""
    deltas: list[Delta] = []
    for piece in pieces:
        deltas += feed(piece)
    return deltas + finish()


SPLITS = [(seed, longest) for seed, longest in enumerate((1, 2, 3, 5, 8, 13, 40))]
