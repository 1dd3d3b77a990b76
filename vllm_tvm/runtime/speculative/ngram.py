"""N-gram prompt lookup: draft tokens copied from where the sequence's last tokens occurred
before.

Why it exists: on input-copying work (edit this code, quote this passage) the next tokens
very often continue an earlier occurrence of the last few, and finding that occurrence costs
no model at all. As in vLLM's n-gram proposer, the longest suffix of `prompt_lookup_max`
down to `prompt_lookup_min` tokens that occurred earlier wins; of its occurrences the most
recent one is followed (the one most likely still being copied), and the tokens after it
are the draft.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class NgramProposer:
    """Proposes drafts from a sequence's own tokens (prompt and output so far)."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n = min_n
        self.max_n = max_n

    def propose(self, token_ids: Sequence[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` tokens that followed the latest earlier occurrence of the
        longest matching suffix; none when no suffix of a length in range occurred before."""
        count = len(token_ids)
        if max_tokens < 1 or count <= self.min_n:
            return []
        tokens = np.asarray(token_ids, dtype=np.int64)
        for n in range(min(self.max_n, count - 1), self.min_n - 1, -1):
            suffix = tokens[count - n :]
            # Windows starting before the suffix itself: the match must lie strictly earlier.
            windows = np.lib.stride_tricks.sliding_window_view(tokens[: count - 1], n)
            starts = np.flatnonzero((windows == suffix).all(axis=1))
            if starts.size:
                follow = int(starts[-1]) + n
                return tokens[follow : follow + max_tokens].tolist()
        return []
