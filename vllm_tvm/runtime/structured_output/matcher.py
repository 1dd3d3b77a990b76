"""One sequence's position inside its grammar: which tokens may come next, and advancing.

Why it exists: the engine needs three things per constrained sequence and decode step —
the set of allowed next tokens (as a packed bitmask it can apply to a logits row), a way to
advance by the sampled token, and to know when the grammar has ended. This wraps
llguidance's `LLMatcher` behind those three, with errors that name the token and the
constraint instead of a silent error state.
"""

from __future__ import annotations

import llguidance
import numpy as np

from vllm_tvm.runtime.structured_output.bitmask import unpack_bitmask


class GrammarMatcher:
    """The grammar state of one sequence (build it with `GrammarVocabulary.compile`).

    Each step: `fill_bitmask` (or `allowed_mask`), sample from the masked logits, then
    `accept` the sampled token. Once the grammar is complete the mask allows only EOS; the
    matcher is terminated after it accepts an EOS token.
    """

    def __init__(
        self,
        ll_matcher: llguidance.LLMatcher,
        *,
        mask_words: int,
        eos_token_ids: frozenset[int],
        description: str,
    ) -> None:
        self.ll_matcher = ll_matcher
        """The llguidance matcher; batch helpers hand it to llguidance's parallel executor."""
        self.mask_words = mask_words
        """Number of int32 words in this matcher's packed bitmask (32 token ids per word)."""
        self._eos_token_ids = eos_token_ids
        self._description = description
        self._terminated = False

    def fill_bitmask(self, row: np.ndarray) -> None:
        """Write the allowed-next-token bitmask into `row`, a C-contiguous int32 array of
        `mask_words` words: bit `t % 32` of word `t // 32` is set when token `t` is allowed."""
        if row.dtype != np.int32 or row.shape != (self.mask_words,):
            raise ValueError(
                f"bitmask row must be int32 of shape ({self.mask_words},), "
                f"got {row.dtype} of shape {row.shape}."
            )
        if not row.flags["C_CONTIGUOUS"]:
            raise ValueError("bitmask row must be C-contiguous.")
        self.ll_matcher.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)

    def allowed_mask(self, vocab_size: int) -> np.ndarray:
        """Booleans of length `vocab_size`: True where the token may come next.

        Ids past the grammar vocabulary are False.
        """
        row = np.empty(self.mask_words, dtype=np.int32)
        self.fill_bitmask(row)
        return unpack_bitmask(row, vocab_size)

    def accept(self, token_id: int) -> None:
        """Advance by the sampled `token_id`; ValueError if the grammar does not allow it."""
        if self._terminated:
            raise ValueError(
                f"token {token_id} offered after the {self._description} already ended "
                "with an EOS token."
            )
        if not self.ll_matcher.consume_token(int(token_id)):
            reason = self.ll_matcher.get_error().splitlines()[0]
            raise ValueError(
                f"token {token_id} is not allowed by the {self._description}: {reason}"
            )
        if token_id in self._eos_token_ids:
            self._terminated = True

    def is_terminated(self) -> bool:
        """True once the grammar is complete and an EOS token has been accepted."""
        return self._terminated

    def fork(self) -> GrammarMatcher:
        """An independent copy at the same position (for the `n` samples of one request)."""
        twin = GrammarMatcher(
            self.ll_matcher.deep_copy(),
            mask_words=self.mask_words,
            eos_token_ids=self._eos_token_ids,
            description=self._description,
        )
        twin._terminated = self._terminated
        return twin
