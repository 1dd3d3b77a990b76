"""The engine's per-step hook for structured output: mask each constrained sequence's logits
row with the tokens its grammar allows next.

Why it exists: the grammar library (matchers, bitmasks) knows nothing about requests and the
engine knows nothing about grammars. This module is the seam between them: a front end
registers a constraint under a request id before queuing the request, the engine calls the
hook with the batch's sequences and logits just before sampling, and the hook masks the rows
of the constrained ones in place. It advances each matcher lazily by the tokens the sequence
sampled since the previous call, so the engine needs no second call after sampling.

Threads: `register`/`release` run on the caller's thread, `__call__` on the engine's; the
only shared state is two dicts whose single operations are atomic. A sequence whose sampled
token its grammar refused (it cannot happen unless a stage after the mask changed the
token), or whose mask the grammar engine failed to compute, gets a fully masked row: the
sampler then fails that sequence alone with finish reason "error".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from vllm_tvm.runtime.structured_output.bitmask import (
    allocate_bitmask,
    apply_bitmask_inplace,
    fill_bitmasks,
)
from vllm_tvm.runtime.structured_output.matcher import GrammarMatcher
from vllm_tvm.runtime.structured_output.params import StructuredOutputsParams
from vllm_tvm.runtime.structured_output.vocabulary import GrammarVocabulary
from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer

logger = logging.getLogger(__name__)


class ConstrainedSequence(Protocol):
    """What the hook reads of an engine sequence."""

    request_id: str
    index: int

    @property
    def output_token_ids(self) -> list[int]:
        """Tokens generated so far."""
        ...


@dataclass
class _SequenceGrammar:
    """One sequence's matcher and how many of its output tokens it has accepted."""

    matcher: GrammarMatcher
    accepted: int = 0
    failed: bool = False

    def catch_up(self, output_token_ids: Sequence[int]) -> None:
        """Accept the tokens sampled since the last call; `failed` once one is refused."""
        while not self.failed and self.accepted < len(output_token_ids):
            try:
                self.matcher.accept(output_token_ids[self.accepted])
            except ValueError as err:
                logger.warning("structured output failed: %s", err)
                self.failed = True
            self.accepted += 1


class GrammarConstraints:
    """Grammar constraints by request id, applied to an engine's logits every step.

    Build one per engine with its tokenizer, logits width (`vocab_size`, which may exceed
    the tokenizer's: padding ids are never allowed) and stop ids; add it to the engine's
    logits hooks. The grammar vocabulary is built on the first `register` (seconds for a
    large vocabulary), not at construction.
    """

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, eos_token_ids: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._eos_token_ids = [t for t in eos_token_ids if 0 <= t < tokenizer.vocab_size]
        self._vocabulary: GrammarVocabulary | None = None
        self._lock = threading.Lock()
        self._roots: dict[str, GrammarMatcher] = {}
        self._sequences: dict[str, dict[int, _SequenceGrammar]] = {}

    @property
    def vocabulary(self) -> GrammarVocabulary:
        """The grammar vocabulary (built on first use)."""
        with self._lock:
            if self._vocabulary is None:
                self._vocabulary = GrammarVocabulary(
                    self._tokenizer, self._vocab_size, self._eos_token_ids
                )
            return self._vocabulary

    def register(self, request_id: str, params: StructuredOutputsParams) -> None:
        """Constrain the request `request_id` (all its `n` sequences) to `params`.

        Call before the request is queued. Raises ValueError when the constraint is invalid
        (a bad schema, regex, grammar or choice list) or the id is already registered.
        """
        if request_id in self._roots:
            raise ValueError(f"request id {request_id!r} already has a structured output")
        self._roots[request_id] = self.vocabulary.compile(params)
        self._sequences[request_id] = {}

    def release(self, request_id: str) -> None:
        """Forget the constraint of a request that ended (a no-op for unknown ids)."""
        self._roots.pop(request_id, None)
        self._sequences.pop(request_id, None)

    def __len__(self) -> int:
        """Number of requests with a constraint."""
        return len(self._roots)

    def constrains(self, seq: ConstrainedSequence) -> bool:
        """Whether `seq`'s row is masked by a grammar (its request registered one): only those
        rows must be sampled on the host, the others can stay on the device."""
        return seq.request_id in self._roots

    def __call__(self, seqs: Sequence[ConstrainedSequence], logits: np.ndarray) -> None:
        """Mask row i of `logits` ([len(seqs), vocab], in place) to what sequence i's grammar
        allows next; rows of unconstrained sequences are left as they are."""
        if not self._roots:
            return
        matchers: list[GrammarMatcher | None] = [None] * len(seqs)
        for row, seq in enumerate(seqs):
            grammar = self._grammar_of(seq)
            if grammar is None:
                continue
            grammar.catch_up(seq.output_token_ids)
            if grammar.failed or grammar.matcher.is_terminated():
                logits[row] = -np.inf
            else:
                matchers[row] = grammar.matcher
        if not any(m is not None for m in matchers):
            return
        bitmask = allocate_bitmask(len(seqs), self.vocabulary.mask_words)
        try:
            rows = fill_bitmasks(matchers, bitmask)
        except Exception:  # the grammar engine failed: fail these sequences, not the step
            logger.exception("structured output masks failed; failing the constrained rows")
            for row, matcher in enumerate(matchers):
                if matcher is not None:
                    logits[row] = -np.inf
            return
        apply_bitmask_inplace(logits, bitmask, rows)

    def _grammar_of(self, seq: ConstrainedSequence) -> _SequenceGrammar | None:
        root = self._roots.get(seq.request_id)
        per_index = self._sequences.get(seq.request_id)
        if root is None or per_index is None:
            return None
        grammar = per_index.get(seq.index)
        if grammar is None:
            grammar = per_index[seq.index] = _SequenceGrammar(root.fork())
        return grammar
