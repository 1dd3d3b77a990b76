"""Runs a compiled artifact: weights on the device, the KV cache, and one forward call.

The runner knows the compiled contract (embed / prefill / decode / create_kv_cache, and the
device sampling functions argmax / sample) and nothing about requests or sampling policy:
callers hand it sequence ids and token ids and get fp32 logits back, as numpy arrays
(`prefill` / `decode`) or left on the device (`prefill_logits` / `decode_logits`, see
sampling/device_logits.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from vllm_tvm.artifacts.manifest import LIBRARY_NAME, ArtifactError, Manifest, read_manifest
from vllm_tvm.artifacts.runtime_spec import RAGGED_LATENT
from vllm_tvm.artifacts.speculative_roles import HIDDEN_STATES_FUNCTION, HIDDEN_SUFFIX
from vllm_tvm.kernels import load_artifact_extensions
from vllm_tvm.runtime.devices import DEVICES
from vllm_tvm.runtime.kv.kv_cache import COMPILED_PAGE_SIZE, KVCacheConfig, PagedKVCache
from vllm_tvm.runtime.model.artifact_fit import check_runs_on, fit_context_limit
from vllm_tvm.runtime.model.cpu_threads import (
    configure_cpu_pool,
    plan_cpu_threads,
    prepare_cpu_pool,
)
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.weights.loader import load_params, open_weights, to_dtype


def _tvm_device(device: str) -> Any:
    import tvm

    if device == "cpu":
        return tvm.cpu(0)
    if device == "cuda":
        return tvm.cuda(0)
    raise ValueError(f"unsupported device '{device}'; supported: " + ", ".join(DEVICES))


class ModelRunner:
    """A loaded model: library, parameters and KV cache on one device."""

    def __init__(
        self,
        artifact_dir: str | Path,
        model_path: str | Path,
        device: str = "cpu",
        max_model_len: int | None = None,
        max_batch_size: int = 1,
        prefill_chunk_size: int = 2048,
        page_size: int = COMPILED_PAGE_SIZE,
        show_progress: bool = True,
        max_total_seq_len: int | None = None,
        params: list[Any] | None = None,
        manifest: Manifest | None = None,
    ) -> None:
        """`max_model_len` None means the model's own limit; a larger value is refused.

        `max_total_seq_len` is the KV pool in tokens (None: `max_model_len * max_batch_size`).
        `params` are parameters already on the device in manifest order (e.g. handed over
        through DLPack by a benchmark that made them with torch); then `model_path` is unused.
        `manifest` is the artifact's, already read and verified by the caller (None: read
        here), so an engine start hashes the artifact once.
        On the CPU, TVM's worker pool is sized and pinned first (see cpu_threads.py).
        """
        from vllm_tvm.runtime.tvm_runtime import load_runtime

        cpu_plan = plan_cpu_threads() if device == "cpu" else None
        if cpu_plan is not None:
            prepare_cpu_pool(cpu_plan)
        tvm = load_runtime(require_cuda=device == "cuda")
        self.artifact_dir = Path(artifact_dir)
        artifact_dir = self.artifact_dir
        self.manifest = manifest or read_manifest(artifact_dir)
        check_runs_on(self.manifest, artifact_dir, device)
        self.spec = self.manifest.runtime
        self.device = _tvm_device(device)
        self.cpu_threads = configure_cpu_pool(tvm, cpu_plan) if cpu_plan is not None else None
        load_artifact_extensions(artifact_dir, self.manifest.extensions, self.device)
        library = tvm.runtime.load_module(str(artifact_dir / LIBRARY_NAME))
        self.vm = tvm.runtime.vm.VirtualMachine(library, self.device)
        if params is not None and len(params) != len(self.manifest.params):
            raise ValueError(
                f"got {len(params)} parameters; the artifact takes {len(self.manifest.params)}"
            )
        self.params = params or load_params(
            self.manifest.params,
            open_weights(model_path, self.manifest.quantization),
            self.device,
            show_progress,
        )
        self._size_kv_cache(max_model_len, max_batch_size, prefill_chunk_size, page_size)
        if max_total_seq_len is not None:
            self.kv_config = replace(self.kv_config, max_total_seq_len=max_total_seq_len)
        self.kv_cache = PagedKVCache(self.vm["create_kv_cache"], self.kv_config)
        self._embed = self.vm["embed"]
        self._prefill = self.vm["prefill"]
        self._decode = self.vm["decode"]
        # Latent-attention models: a prefill over sequences with cached tokens is `extend`.
        self._extend = self.vm["extend"] if self.spec.ragged_dispatch == RAGGED_LATENT else None
        # Heads export no `decode_single`: their batch 1 runs `decode`.
        self._decode_single = self.vm["decode_single"] if self.spec.decode_single else self._decode
        self._argmax = self.vm["argmax"] if self.spec.device_sampling else None
        self._sample = self.vm["sample"] if self.spec.device_sampling else None
        self._tvm = tvm
        # Device copies of the current forward's host inputs (see `forward_input`).
        self._held_inputs: list[Any] = []

    def _size_kv_cache(
        self,
        max_model_len: int | None,
        max_batch_size: int,
        prefill_chunk_size: int,
        page_size: int,
    ) -> None:
        """Set `vocab_size`, `hidden_size`, `max_model_len` and the KV cache's `kv_config`
        (pool: `max_model_len * max_batch_size` tokens) from the runtime spec."""
        self.vocab_size = self.spec.vocab_size
        self.hidden_size = self.spec.hidden_size
        self.max_model_len = fit_context_limit(self.spec, max_model_len)
        # A chunk holds pieces of several prompts and may exceed max_model_len (vLLM's 16k
        # budget at 8k), but not the model's own chunk limit (a sliding layer's window).
        self.kv_config = KVCacheConfig(
            max_batch_size=max_batch_size,
            max_total_seq_len=self.max_model_len * max_batch_size,
            prefill_chunk_size=min(
                prefill_chunk_size, self.spec.prefill_chunk_limit or self.spec.context_limit
            ),
            page_size=page_size,
        )

    @property
    def can_sample_on_device(self) -> bool:
        """Whether the artifact has the compiled `argmax` and `sample` functions."""
        return self._argmax is not None and self._sample is not None

    @property
    def kv_bytes_per_token(self) -> int:
        """Device bytes one token's cache entries take over all layers (on each device)."""
        return self.spec.kv_bytes_per_token

    def resize_kv_cache(self, max_total_seq_len: int) -> None:
        """Replace the KV cache by an empty one holding `max_total_seq_len` tokens.

        Every sequence of the old cache is dropped. Used to size the pool after the weights
        are on the device (so free device memory can be measured).
        """
        self.kv_config = replace(self.kv_config, max_total_seq_len=max_total_seq_len)
        self.kv_cache = PagedKVCache(self.vm["create_kv_cache"], self.kv_config)

    def embed_tokens(self, token_ids: Sequence[int]) -> Any:
        """The embeddings [n, hidden] of `token_ids`, on the device. Every forward starts
        here, so the previous forward's inputs are released here (see `forward_input`)."""
        self._held_inputs.clear()
        ids = self.forward_input(np.asarray(token_ids, dtype=np.int32))
        return self._embed(ids, self.params)

    def to_device(self, array: np.ndarray) -> Any:
        """`array` copied to the runner's device."""
        return self._tvm.runtime.tensor(array, self.device)

    def forward_input(self, array: np.ndarray) -> Any:
        """`array` copied to the device and kept until the next forward's embedding.

        Why: a device array made for one call is freed when its last reference goes, and
        cudaFree waits until the whole device is idle. The logit positions of a prefill were
        freed as soon as the launch returned, so the host sat in cudaFree until the forward
        had finished (H200, 8B shape, 1,024-token prefill: 16.5 ms of the host's 22 ms) and
        launched the argmax only after the device had gone idle. At the next forward's start
        the device has finished with them anyway."""
        on_device = self.to_device(array)
        self._held_inputs.append(on_device)
        return on_device

    def _device_logits(self, logits: Any, rows: int) -> DeviceLogits:
        """`rows` rows of `logits` (as wide as the function made them: an EAGLE-3 head's
        cover its draft vocabulary), left on the device."""
        return DeviceLogits(
            logits._create_view((rows, int(logits.shape[-1]))),
            self._argmax,
            self._sample,
            lambda array: self._tvm.runtime.tensor(array, self.device),
        )

    def _prefill_plan(
        self, chunks: Sequence[Sequence[int]], logit_positions: Sequence[int] | None
    ) -> tuple[list[int], np.ndarray, list[int]]:
        """(chunk lengths, int32 logit positions, the chunks' tokens concatenated) of one
        prefill call; ValueError when the tokens exceed the cache's prefill chunk size."""
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

    def _ragged_mode(self, seq_ids: Sequence[int], lengths: Sequence[int]) -> str:
        """The compiled forward a ragged batch runs: a latent-attention model's cache appends
        one-token steps before attention, so only `decode` reads those right, and a prefill
        over sequences with cached tokens is its `extend`; every other model `prefill`."""
        if self._extend is None:
            return "prefill"
        if all(length == 1 for length in lengths):
            return "decode"
        if any(self.kv_cache.sequence_length(seq_id) for seq_id in seq_ids):
            return "extend"
        return "prefill"

    def prefill_logits(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
    ) -> DeviceLogits:
        """Append each chunk to its sequence in one ragged forward; the fp32 logits rows
        [len(logit_positions), vocab], left on the device.

        `logit_positions` index the concatenated chunk tokens (default: each chunk's last
        token, one row per chunk). The total length must fit the cache's prefill chunk size;
        the scheduler splits longer work into several calls.
        """
        lengths, positions, flat = self._prefill_plan(chunks, logit_positions)
        mode = self._ragged_mode(seq_ids, lengths)
        if mode == "decode":
            rows = self.decode_logits(seq_ids, flat)
            if np.array_equal(positions, np.arange(len(lengths))):
                return rows
            return self._device_logits(self.to_device(rows.numpy()[positions]), len(positions))
        forward = self._extend if mode == "extend" else self._prefill
        hidden = self.embed_tokens(flat)._create_view((1, len(flat), self.hidden_size))
        self.kv_cache.begin_forward(seq_ids, lengths)
        logits, _ = forward(
            hidden, self.forward_input(positions), self.kv_cache.handle, self.params
        )
        self.kv_cache.end_forward()
        return self._device_logits(logits, len(positions))

    def run_ragged(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None,
        suffix: str = "",
        input_hidden: np.ndarray | None = None,
        zeroed_rows: Sequence[int] = (),
    ) -> tuple[DeviceLogits, np.ndarray, np.ndarray]:
        """One ragged forward through the compiled `{mode}{suffix}` that returns hidden
        states next to the logits; `input_hidden` [tokens, hidden] goes in after the
        embeddings (their rows `zeroed_rows` zeroed) when the function takes it. The logits
        rows at the positions, every hidden row the function returned [rows, width] (at the
        positions, or of every token; as wide as the function made them), and the int32
        positions."""
        lengths, positions, flat = self._prefill_plan(chunks, logit_positions)
        mode = self._ragged_mode(seq_ids, lengths)
        rows_shape = (len(flat), 1) if mode == "decode" else (1, len(flat))
        embeddings = self.embed_tokens(flat)
        if zeroed_rows:
            host = embeddings.numpy()
            host[list(zeroed_rows)] = 0
            embeddings = self.forward_input(host)
        inputs = [embeddings._create_view((*rows_shape, self.hidden_size))]
        if input_hidden is not None:
            typed = np.ascontiguousarray(to_dtype(input_hidden, self.manifest.dtype))
            inputs.append(self.forward_input(typed.reshape(*rows_shape, -1)))
        if mode != "decode":
            inputs.append(self.forward_input(positions))
        self.kv_cache.begin_forward(seq_ids, lengths)
        logits, hidden, _ = self.vm[mode + suffix](*inputs, self.kv_cache.handle, self.params)
        self.kv_cache.end_forward()
        if mode == "decode":
            logits = self.to_device(logits.numpy().reshape(len(flat), -1)[positions])
        rows = self._device_logits(logits, len(positions))
        out = hidden.numpy()
        return rows, out.reshape(-1, out.shape[-1]), positions

    def prefill_with_hidden(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
    ) -> tuple[DeviceLogits, np.ndarray]:
        """`prefill_logits` through the artifact's hidden-states functions, and the hidden
        states of every token of the chunks on the host: the final-norm ones [total, hidden]
        or, for a target built for an EAGLE-3 head, its aux layers' inputs [total, 3 * hidden]."""
        if self.spec.hidden_states is None:
            raise ArtifactError(
                f"the artifact has no {HIDDEN_STATES_FUNCTION!r}: build it for drafting from "
                "hidden states (EAGLE, MTP)"
            )
        logits, hidden, _ = self.run_ragged(seq_ids, chunks, logit_positions, HIDDEN_SUFFIX)
        return logits, hidden

    def decode_logits(self, seq_ids: Sequence[int], token_ids: Sequence[int]) -> DeviceLogits:
        """One new token per sequence; the logits [batch, vocab] after it, on the device."""
        batch = len(seq_ids)
        hidden = self.embed_tokens(token_ids)._create_view((batch, 1, self.hidden_size))
        self.kv_cache.begin_forward(seq_ids, [1] * batch)
        forward = self._decode_single if batch == 1 else self._decode
        logits, _ = forward(hidden, self.kv_cache.handle, self.params)
        self.kv_cache.end_forward()
        return self._device_logits(logits, batch)

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
