"""The runner interface: what the engine, its batches and the proposers call on a loaded
model, whatever runs it.

Why an ABC: a model runs on one device (runner.py) or over tensor-parallel ranks
(tensor_parallel_runner.py). Each implementation loads and calls its library its own way;
they share what is the same for both (the sizes settled from the runtime spec, the plan of
a ragged batch, host copies of the logits) and nothing else, so neither inherits a method
that needs the other's state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from vllm_tvm.artifacts.manifest import Manifest
from vllm_tvm.artifacts.runtime_spec import RuntimeSpec
from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig, PagedKVCache
from vllm_tvm.runtime.kv.recurrent_pool import RecurrentStatePool
from vllm_tvm.runtime.model.artifact_fit import fit_context_limit
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits


class Runner(ABC):
    """A loaded model and its KV cache: token ids in, fp32 logits out."""

    manifest: Manifest
    spec: RuntimeSpec
    """The manifest's runtime spec: all the runner knows of the model."""
    device: Any
    vocab_size: int
    hidden_size: int
    max_model_len: int
    kv_config: KVCacheConfig
    kv_cache: PagedKVCache
    recurrent_pool: RecurrentStatePool | None = None
    """The recurrent-state pool of a hybrid model (`resize_recurrent_pool`); None: none."""

    def _settle_sizes(
        self,
        max_model_len: int | None,
        max_batch_size: int,
        prefill_chunk_size: int,
        page_size: int,
        max_total_seq_len: int | None,
    ) -> None:
        """Set `vocab_size`, `hidden_size`, `max_model_len` and the KV cache's `kv_config`
        from the runtime spec (pool: `max_total_seq_len` tokens, None: `max_model_len *
        max_batch_size`)."""
        self.vocab_size = self.spec.vocab_size
        self.hidden_size = self.spec.hidden_size
        self.max_model_len = fit_context_limit(self.spec, max_model_len)
        # A chunk holds pieces of several prompts and may exceed max_model_len (vLLM's 16k
        # budget at 8k), but not the model's own chunk limit (a sliding layer's window).
        chunk_limit = self.spec.prefill_chunk_limit or self.spec.context_limit
        self.kv_config = KVCacheConfig(
            max_batch_size=max_batch_size,
            max_total_seq_len=max_total_seq_len or self.max_model_len * max_batch_size,
            prefill_chunk_size=min(prefill_chunk_size, chunk_limit),
            page_size=page_size,
        )

    @property
    def kv_bytes_per_token(self) -> int:
        """Device bytes one token's cache entries take over all layers (on each device)."""
        return self.spec.kv_bytes_per_token

    @property
    @abstractmethod
    def can_sample_on_device(self) -> bool:
        """Whether logits left on the device can be reduced there (`argmax` / `sample`)."""

    def resize_kv_cache(self, max_total_seq_len: int) -> None:
        """Replace the KV cache by an empty one holding `max_total_seq_len` tokens.

        Every sequence of the old cache is dropped. Used to size the pool after the weights
        are on the device (so free device memory can be measured).
        """
        self.kv_config = replace(self.kv_config, max_total_seq_len=max_total_seq_len)
        self.kv_cache = self._new_kv_cache()

    def resize_recurrent_pool(self, num_slots: int, snapshots: bool = False) -> None:
        """Replace the recurrent-state pool by one of `num_slots` slots (0: no pool), sized
        with the KV pool; `snapshots`: with a snapshot row per slot (speculative decoding)."""
        self.recurrent_pool = (
            RecurrentStatePool(self.spec.recurrent_state, num_slots, self.device, snapshots)
            if num_slots
            else None
        )

    @abstractmethod
    def _new_kv_cache(self) -> PagedKVCache:
        """An empty KV cache of `kv_config`."""

    @abstractmethod
    def prefill_logits(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
        recurrent_slots: Sequence[int] | None = None,
    ) -> DeviceLogits:
        """Append each chunk to its sequence in one ragged forward; the fp32 logits rows
        [len(logit_positions), vocab] (default: each chunk's last token). A model with
        recurrent state reads and writes sequence i's state at `recurrent_slots[i]`.

        The total length must fit the cache's prefill chunk size; the scheduler splits
        longer work into several calls.
        """

    @abstractmethod
    def decode_logits(
        self,
        seq_ids: Sequence[int],
        token_ids: Sequence[int],
        recurrent_slots: Sequence[int] | None = None,
    ) -> DeviceLogits:
        """One new token per sequence; the logits [batch, vocab] after it (`recurrent_slots`
        as in `prefill_logits`)."""

    def prefill(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
    ) -> np.ndarray:
        """`prefill_logits`, copied to the host as a numpy array."""
        return self.prefill_logits(seq_ids, chunks, logit_positions).numpy()

    def decode(self, seq_ids: Sequence[int], token_ids: Sequence[int]) -> np.ndarray:
        """`decode_logits`, copied to the host as a numpy array [batch, vocab]."""
        return self.decode_logits(seq_ids, token_ids).numpy()

    def _ragged_plan(
        self, chunks: Sequence[Sequence[int]], logit_positions: Sequence[int] | None
    ) -> tuple[list[int], np.ndarray, list[int]]:
        """(chunk lengths, int32 logit positions, the chunks' tokens concatenated) of one
        ragged forward; ValueError when the tokens exceed the cache's prefill chunk size."""
        lengths = [len(chunk) for chunk in chunks]
        total = sum(lengths)
        if total > self.kv_config.prefill_chunk_size:
            raise ValueError(
                f"prefill of {total} tokens exceeds prefill_chunk_size "
                f"{self.kv_config.prefill_chunk_size}"
            )
        if logit_positions is None:
            positions = np.cumsum(lengths, dtype=np.int32) - 1
        else:
            positions = np.asarray(logit_positions, dtype=np.int32)
        return lengths, positions, [token for chunk in chunks for token in chunk]
