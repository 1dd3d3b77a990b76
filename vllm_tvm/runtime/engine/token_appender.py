"""Sampled tokens into their sequences: at once, or with their text deferred.

Why it exists: appending a token has a cheap half that the next step depends on (the ids,
logprobs, timing and the stop count: `EngineSequence.push_token`) and a costly half that
nothing scheduled next reads (detokenization, stop strings, streamed text:
`render_token`). Under async scheduling (llm_engine.py) the engine launches the next
forward between the two, so the costly half runs while the device works. A token that
ends its sequence by itself (an EOS or stop id, the length limit) and a sequence's first
token are rendered at once: the first so that it is handed out without waiting for another
forward, the ending one so that the sequence is never scheduled again. A stop string can
only be found when rendering, so a sequence it ends may already sit in the forward just
launched: that forward's token for it is dropped (`append` skips finished sequences).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.requests.sequence import EngineSequence
from vllm_tvm.runtime.sampling.dispatch import StepSamples


class TokenAppender:
    """Appends each step's samples; `defer` holds back the text of the others' tokens
    until `render_deferred`. A sequence whose output processing fails ends through `fail`
    (its request alone); one that finishes is `release`d."""

    def __init__(
        self,
        metrics: EngineMetrics,
        fail: Callable[[EngineSequence, str], None],
        release: Callable[[EngineSequence], None],
        defer: bool,
    ) -> None:
        self.metrics = metrics
        self.fail = fail
        self.release = release
        self.defer = defer
        self._deferred: list[tuple[EngineSequence, int, float]] = []

    @property
    def has_deferred(self) -> bool:
        """Whether tokens wait for their text."""
        return bool(self._deferred)

    def append(self, seqs: list[EngineSequence], samples: StepSamples) -> list[EngineSequence]:
        """Give each sequence its sampled token; one that could not be sampled ends with an
        error, one that finished while its forward ran (a stop string found late, an abort)
        takes none. The sequences that changed now, in order (deferred ones change when
        rendered)."""
        failed: list[EngineSequence] = []
        for index, error in samples.errors.items():
            if not seqs[index].is_finished:
                failed.append(seqs[index])
                self.fail(seqs[index], error)
        now = time.perf_counter()
        changed: list[EngineSequence] = []
        appended = 0
        for seq, token_id, logprobs in zip(seqs, samples.token_ids, samples.logprobs, strict=True):
            if token_id is None or seq.is_finished:
                continue
            first = seq.first_token_time is None
            if first:
                self.metrics.add_first_token(now - seq.arrival_time)
                self.metrics.add_tokens(prompt=seq.num_prompt_tokens, generated=0)
            appended += 1
            try:
                ended = seq.push_token(token_id, logprobs, now)
            except Exception as err:  # this request alone fails
                self.fail(seq, f"output processing failed: {err}")
                changed.append(seq)
                continue
            if self.defer and not (ended or first):
                self._deferred.append((seq, token_id, now))
            else:
                self._render(seq, token_id, now)
                changed.append(seq)
        self.metrics.add_tokens(prompt=0, generated=appended)
        return failed + changed

    def render_deferred(self) -> list[EngineSequence]:
        """The text and stop strings of the deferred tokens; the sequences that changed."""
        deferred, self._deferred = self._deferred, []
        rendered: list[EngineSequence] = []
        for seq, token_id, now in deferred:
            if not seq.is_finished:  # else aborted since
                self._render(seq, token_id, now)
                rendered.append(seq)
        return rendered

    def _render(self, seq: EngineSequence, token_id: int, now: float) -> None:
        try:
            seq.render_token(token_id, now)
        except Exception as err:  # e.g. the detokenizer: this request alone fails
            self.fail(seq, f"output processing failed: {err}")
        else:
            if seq.is_finished:
                self.release(seq)
