"""Drafts proposed by an EAGLE head or a DeepSeek MTP layer from the target's own hidden
states.

Why it exists: a draft model predicts from tokens alone; an EAGLE head (model_defs/eagle.py)
also reads the target's final-norm hidden state of each position, so a single small layer
predicts the target far better than a small model would. It runs like a draft model
(draft_model.py: its own KV cache, catch-up, batched drafts, q for sampled requests), with
these differences:
- its KV entry at position p is made of token p + 1 and the target's hidden state at p
  (kept by target_hidden.py), so it holds one entry less than the sequence has tokens, and
  its output there predicts token p + 2;
- draft i + 1 reads draft i and the head's own output hidden state before it;
- entries made from drafts are all dropped next step, accepted or not (as vLLM does): an
  accepted draft's entry was made from the head's hidden state, not the target's, so the
  catch-up remakes it from the target's;
- an MTP layer reads a zero embedding at position 0 (vLLM's deepseek_mtp.py), and drafts
  past the first re-run the same layer (vLLM's k > 1 for MTP).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from vllm_tvm.runtime.requests.sequence import EngineSequence
from vllm_tvm.runtime.sampling.sampler import Sampler
from vllm_tvm.runtime.speculative.draft_model import CatchUpChunk, DraftModelProposer
from vllm_tvm.runtime.speculative.head_runner import HeadRunner
from vllm_tvm.runtime.speculative.target_hidden import TargetHiddenStates


class HeadProposer(DraftModelProposer):
    """Proposes drafts with an EAGLE head over the target's hidden states (`store`)."""

    def __init__(
        self,
        runner: HeadRunner,
        sampler: Sampler,
        store: TargetHiddenStates,
        masks_first_position: bool = False,
    ) -> None:
        """`masks_first_position`: position 0's embedding is zeroed (an MTP layer's input)."""
        super().__init__(runner, sampler)
        self.masks_first_position = masks_first_position
        self.head = runner
        self.store = store
        self._head_hidden: dict[EngineSequence, np.ndarray] = {}
        self._target_kv_ids: dict[EngineSequence, int] = {}

    def forget(self, seq: EngineSequence) -> None:
        super().forget(seq)
        self._head_hidden.pop(seq, None)
        for kv_id in (self._target_kv_ids.pop(seq, None), seq.kv_id):
            if kv_id is not None:  # the KV ids before and after a preemption
                self.store.forget(kv_id)

    def reset(self) -> None:
        super().reset()
        self._head_hidden.clear()

    def note_scheduled(self, seqs: Iterable[EngineSequence]) -> None:
        """Note the target KV id of each sequence of a step (drafted or not), so the hidden
        states kept under the id a preempted sequence had are dropped once it has another
        (or ends)."""
        for seq in seqs:
            previous = self._target_kv_ids.get(seq)
            if previous is not None and previous != seq.kv_id:
                self.store.forget(previous)
            if seq.kv_id is not None:
                self._target_kv_ids[seq] = seq.kv_id

    def _roll_back(self, seq: EngineSequence) -> None:
        """Drop every entry made from drafts (module doc)."""
        state = self._states.get(seq)
        if state is not None and state.fed:
            self.runner.kv_cache.popn(state.kv_id, len(state.fed))
            state.fed = []
        super()._roll_back(seq)

    def _pending(self, seq: EngineSequence) -> list[int]:
        return seq.token_ids[self._states[seq].num_committed + 1 :]

    def _prefill(self, parts: list[CatchUpChunk], positions: list[int]) -> np.ndarray:
        kv_ids = [self._states[part.seq].kv_id for part in parts]
        hidden = np.concatenate([self._target_rows(part) for part in parts])
        ends = np.cumsum([len(part.token_ids) for part in parts]) - 1
        zeroed = [
            int(end) + 1 - len(part.token_ids)
            for part, end in zip(parts, ends, strict=True)
            if self.masks_first_position and part.start == 0
        ]
        logits, out = self.head.prefill_head(
            kv_ids, [part.token_ids for part in parts], hidden, positions, zeroed
        )
        for part, end in zip(parts, ends, strict=True):
            target_kv_id = self._target_kv_ids[part.seq]
            self.store.release(target_kv_id, part.start + len(part.token_ids))
            if end in positions:
                self._head_hidden[part.seq] = out[positions.index(int(end))]
        return logits

    def _target_rows(self, part: CatchUpChunk) -> np.ndarray:
        """The target's hidden states of the positions `part` feeds."""
        stop = part.start + len(part.token_ids)
        return self.store.rows(self._target_kv_ids[part.seq], part.start, stop)

    def _feed_drafts(self, seqs: list[EngineSequence], token_ids: list[int]) -> np.ndarray:
        for seq, token_id in zip(seqs, token_ids, strict=True):
            self._states[seq].fed.append(token_id)
        logits, out = self.head.decode_head(
            [self._states[seq].kv_id for seq in seqs],
            token_ids,
            np.stack([self._head_hidden[seq] for seq in seqs]),
        )
        for seq, row in zip(seqs, out, strict=True):
            self._head_hidden[seq] = row
        return logits
