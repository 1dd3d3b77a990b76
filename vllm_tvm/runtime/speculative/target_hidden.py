"""The target's hidden states, kept per KV sequence for the EAGLE head that drafts from them.

Why it exists: an EAGLE head reads, at each position, the target's final-norm hidden state
there (model_defs/eagle.py), and the target computes those in the engine's own forwards.
`HiddenCapturingRunner` stands in for the target's runner in those forwards: it runs the
artifact's hidden-states prefill (a decode row is a one-token chunk) and keeps, per KV
sequence, a run of rows from some position on. A chunk overwrites what the run held from
its start (rejected drafts' rows are replaced as the committed tokens are recomputed); the
proposer releases rows it has fed to the head and forgets a sequence's run when it ends.
Positions the target never computed for a sequence (a prefix-cache hit) have no row: the
head reads zeros there, which only lowers its acceptance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.requests.prompt_images import ForwardImages
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits


@dataclass
class _Run:
    """Rows of positions `start`, `start + 1`, ... of one KV sequence."""

    start: int
    rows: np.ndarray

    @property
    def stop(self) -> int:
        return self.start + len(self.rows)


class TargetHiddenStates:
    """Per KV sequence of the target, the hidden states of its last computed positions."""

    def __init__(self, hidden_size: int) -> None:
        self.hidden_size = hidden_size
        self._runs: dict[int, _Run] = {}

    def record(self, kv_id: int, start: int, rows: np.ndarray) -> None:
        """The rows of positions `start`... of `kv_id`, replacing what it held from there."""
        run = self._runs.get(kv_id)
        if run is None or not run.start <= start <= run.stop:
            self._runs[kv_id] = _Run(start, rows.copy())
            return
        run.rows = np.concatenate([run.rows[: start - run.start], rows])

    def rows(self, kv_id: int, start: int, stop: int) -> np.ndarray:
        """The rows of positions [start, stop) of `kv_id`, zeros where none was kept."""
        run = self._runs.get(kv_id)
        if run is None:
            return np.zeros((stop - start, self.hidden_size), dtype=np.float32)
        out = np.zeros((stop - start, self.hidden_size), dtype=run.rows.dtype)
        low, high = max(start, run.start), min(stop, run.stop)
        if low < high:
            out[low - start : high - start] = run.rows[low - run.start : high - run.start]
        return out

    def release(self, kv_id: int, upto: int) -> None:
        """Drop the rows of `kv_id` before position `upto` (fed to the head)."""
        run = self._runs.get(kv_id)
        if run is not None and upto > run.start:
            cut = min(upto, run.stop) - run.start
            run.rows, run.start = run.rows[cut:], run.start + cut

    def forget(self, kv_id: int) -> None:
        """Drop every row of `kv_id` (its sequence ended or was preempted)."""
        self._runs.pop(kv_id, None)

    @property
    def num_sequences(self) -> int:
        """KV sequences holding rows."""
        return len(self._runs)


class HiddenCapturingRunner:
    """The target's forwards (batch.ForwardRunner) with every token's hidden state kept."""

    def __init__(self, runner: ModelRunner, store: TargetHiddenStates) -> None:
        self.runner = runner
        self.store = store

    def prefill_logits(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
        recurrent_slots: Sequence[int] | None = None,
        images: ForwardImages | None = None,
        rope_positions: np.ndarray | None = None,
    ) -> DeviceLogits:
        starts = [self.runner.kv_cache.sequence_length(kv_id) for kv_id in seq_ids]
        logits, hidden = self.runner.prefill_with_hidden(
            seq_ids,
            chunks,
            logit_positions,
            recurrent_slots=recurrent_slots,
            images=images,
            rope_positions=rope_positions,
        )
        offset = 0
        for kv_id, start, chunk in zip(seq_ids, starts, chunks, strict=True):
            self.store.record(kv_id, start, hidden[offset : offset + len(chunk)])
            offset += len(chunk)
        return logits

    def encode_images(
        self, pixel_values: np.ndarray, layout: Sequence[np.ndarray] = ()
    ) -> np.ndarray:
        """The target's encoder (a vision model's images feed its forwards as ever)."""
        return self.runner.encode_images(pixel_values, layout)

    def decode_logits(
        self,
        seq_ids: Sequence[int],
        token_ids: Sequence[int],
        recurrent_slots: Sequence[int] | None = None,
    ) -> DeviceLogits:
        chunks = [[token_id] for token_id in token_ids]
        return self.prefill_logits(seq_ids, chunks, None, recurrent_slots)
