"""Derive a BPE merge list from a vocabulary ranked by merge priority.

Why: SentencePiece models (scores) and tiktoken files (ranks) store no merges; they merge
the adjacent pair whose joined piece ranks best. HF `tokenizers` BPE wants explicit ranked
merges, and listing every two-piece split of each piece, in the piece's priority order,
gives it the same behaviour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def merges_from_priority(
    pieces_best_first: Iterable[str], vocab: Mapping[str, int]
) -> list[tuple[str, str]]:
    """Every split of each piece into two `vocab` entries, in the order the pieces are given
    (best first); splits of one piece are ordered by the ids of their halves."""
    merges: list[tuple[str, str]] = []
    for piece in pieces_best_first:
        splits = [
            (piece[:k], piece[k:])
            for k in range(1, len(piece))
            if piece[:k] in vocab and piece[k:] in vocab
        ]
        splits.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        merges.extend(splits)
    return merges
