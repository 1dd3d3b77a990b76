"""Packed token bitmasks for a decode batch: fill them for all constrained rows at once,
apply them to a float32 logits matrix in place.

Why it exists: a mask over a 128k vocabulary is 4,008 int32 words but 128k booleans; the
grammar engine writes the packed form directly, and computing the masks of a whole batch
in one call lets llguidance spread the rows over its own threads without the GIL. Only the
final apply touches one float per vocabulary entry, once per constrained row.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

import llguidance
import llguidance.numpy
import numpy as np

if TYPE_CHECKING:
    from vllm_tvm.runtime.structured_output.matcher import GrammarMatcher

ALL_ALLOWED = -1
"""An int32 word with every bit set: the 32 ids it covers are all allowed."""


def mask_words_for(vocab_size: int) -> int:
    """Number of int32 words that hold one bit per id of a `vocab_size` vocabulary."""
    return (vocab_size + 31) // 32


def allocate_bitmask(batch_size: int, mask_words: int) -> np.ndarray:
    """A (batch_size, mask_words) int32 bitmask with every token allowed; reuse it per step."""
    return np.full((batch_size, mask_words), ALL_ALLOWED, dtype=np.int32)


@cache
def _executor() -> llguidance.LLExecutor:
    return llguidance.LLExecutor()


def fill_bitmasks(matchers: Sequence[GrammarMatcher | None], bitmask: np.ndarray) -> list[int]:
    """Fill row i of `bitmask` with the allowed tokens of `matchers[i]`, all rows at once.

    Rows whose matcher is None (unconstrained sequences) are left as they are. Returns the
    indices of the rows that were filled, to pass to `apply_bitmask_inplace`.
    """
    if bitmask.dtype != np.int32 or bitmask.ndim != 2 or not bitmask.flags["C_CONTIGUOUS"]:
        raise ValueError(
            "bitmask must be a C-contiguous 2-D int32 array, "
            f"got {bitmask.dtype} of shape {bitmask.shape}."
        )
    if len(matchers) > bitmask.shape[0]:
        raise ValueError(
            f"{len(matchers)} matchers do not fit a bitmask of {bitmask.shape[0]} rows."
        )
    rows = [i for i, m in enumerate(matchers) if m is not None]
    jobs = []
    for i in rows:
        matcher = matchers[i]
        assert matcher is not None
        if matcher.mask_words != bitmask.shape[1]:
            raise ValueError(
                f"matcher of row {i} needs {matcher.mask_words} mask words, "
                f"the bitmask has {bitmask.shape[1]}."
            )
        jobs.append((matcher.ll_matcher, i))
    if jobs:
        llguidance.numpy.fill_next_token_bitmask_par(_executor(), jobs, bitmask)
    return rows


def unpack_bitmask(row: np.ndarray, vocab_size: int) -> np.ndarray:
    """Booleans of length `vocab_size` from one packed int32 row (ids past the row: False)."""
    packed = np.ascontiguousarray(row, dtype="<i4").view(np.uint8)
    return np.unpackbits(packed, bitorder="little", count=vocab_size).view(np.bool_)


def apply_bitmask_inplace(
    logits: np.ndarray, bitmask: np.ndarray, rows: Sequence[int] | None = None
) -> None:
    """Set `logits[r, t] = -inf` for every token t that row r of `bitmask` disallows.

    `logits` is a (batch, vocab) float array, changed in place; `rows` limits the work to the
    constrained rows (default: all). Ids past the bitmask's width count as disallowed.
    """
    if logits.ndim != 2:
        raise ValueError(f"logits must be 2-D (batch, vocab), got shape {logits.shape}.")
    vocab_size = logits.shape[1]
    covered = min(vocab_size, bitmask.shape[1] * 32)
    for r in range(logits.shape[0]) if rows is None else rows:
        packed = np.ascontiguousarray(bitmask[r], dtype="<i4").view(np.uint8)
        disallowed = np.unpackbits(~packed, bitorder="little", count=covered).view(np.bool_)
        np.copyto(logits[r, :covered], -np.inf, where=disallowed)
        logits[r, covered:] = -np.inf
