"""Runs a compiled artifact on one device: weights on the device, the KV cache, and one
forward call.

The runner knows the compiled contract (embed / prefill / extend / decode / decode_single /
create_kv_cache, the `*_hidden` twins, and the device sampling functions argmax / sample)
and nothing about requests or sampling policy: callers hand it sequence ids and token ids
and get fp32 logits back, as numpy arrays (`prefill` / `decode`) or left on the device
(`prefill_logits` / `decode_logits`, see sampling/device_logits.py). Every ragged batch,
with or without hidden states, goes through `run_ragged`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vllm_tvm.artifacts.manifest import LIBRARY_NAME, ArtifactError, Manifest, read_manifest
from vllm_tvm.artifacts.owned_kv import (
    OWNED_DECODE,
    OWNED_DECODE_SINGLE,
    OWNED_PREFILL_FRESH,
)
from vllm_tvm.artifacts.runtime_spec import RAGGED_LATENT
from vllm_tvm.artifacts.speculative_roles import HIDDEN_STATES_FUNCTION, HIDDEN_SUFFIX
from vllm_tvm.extensions import load_artifact_extensions
from vllm_tvm.runtime.devices import DEVICES
from vllm_tvm.runtime.kv import flashinfer_ragged
from vllm_tvm.runtime.kv.kv_cache import COMPILED_PAGE_SIZE, PagedKVCache
from vllm_tvm.runtime.kv.owned_kv_cache import OwnedKVCache
from vllm_tvm.runtime.model.artifact_fit import check_runs_on
from vllm_tvm.runtime.model.cpu_threads import (
    configure_cpu_pool,
    plan_cpu_threads,
    prepare_cpu_pool,
)
from vllm_tvm.runtime.model.image_attention import IMAGE_PREFILL, image_attention_inputs
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.requests.prompt_images import ForwardImages
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.weights.loader import load_params, open_weights, to_dtype

DECODE = "decode"


def _tvm_device(device: str) -> Any:
    import tvm

    if device == "cpu":
        return tvm.cpu(0)
    if device == "cuda":
        return tvm.cuda(0)
    raise ValueError(f"unsupported device '{device}'; supported: " + ", ".join(DEVICES))


class ModelRunner(Runner):
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
        self.manifest = manifest or read_manifest(self.artifact_dir)
        check_runs_on(self.manifest, self.artifact_dir, device)
        self.spec = self.manifest.runtime
        self.device = _tvm_device(device)
        self.cpu_threads = configure_cpu_pool(tvm, cpu_plan) if cpu_plan is not None else None
        load_artifact_extensions(self.artifact_dir, self.manifest.extensions, self.device)
        library = tvm.runtime.load_module(str(self.artifact_dir / LIBRARY_NAME))
        owned = self.spec.owned_pages
        self._ragged = flashinfer_ragged.register_ragged_attention(owned, library, tvm, self.device)
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
        self._settle_sizes(
            max_model_len, max_batch_size, prefill_chunk_size, page_size, max_total_seq_len
        )
        self._tvm = tvm
        self.kv_cache = self._new_kv_cache()
        self._embed = self.vm["embed"]
        self._functions: dict[str, Any] = {}
        self._argmax = self.vm["argmax"] if self.spec.device_sampling else None
        self._sample = self.vm["sample"] if self.spec.device_sampling else None
        # Device copies of the current forward's host inputs (see `forward_input`).
        self._held_inputs: list[Any] = []

    def _new_kv_cache(self) -> PagedKVCache | OwnedKVCache:
        """Pages the runner owns when the runtime spec has `owned_pages` (an artifact built
        with the `owned_kv` option; `_ragged` plans its prefills), else TVM's cache."""
        owned = self.spec.owned_pages
        if owned is None:
            return PagedKVCache(self.vm["create_kv_cache"], self.kv_config)
        return OwnedKVCache(
            self.kv_config,
            owned,
            self.manifest.dtype,
            self.max_model_len,
            lambda shape, dtype: self._tvm.runtime.empty(shape, dtype, self.device),
            self.to_device,
            self._ragged,
        )

    def _function(self, name: str) -> Any:
        """The compiled function `name`, looked up once."""
        if name not in self._functions:
            self._functions[name] = self.vm[name]
        return self._functions[name]

    @property
    def can_sample_on_device(self) -> bool:
        return self._argmax is not None and self._sample is not None

    def embed_tokens(self, token_ids: Sequence[int]) -> Any:
        """The embeddings [n, hidden] of `token_ids`, on the device. Every forward starts
        here, so the previous forward's inputs are released here (see `forward_input`)."""
        self._held_inputs.clear()
        ids = self.forward_input(np.asarray(token_ids, dtype=np.int32))
        return self._embed(ids, self.params)

    def encode_images(
        self, pixel_values: np.ndarray, layout: Sequence[np.ndarray] = ()
    ) -> np.ndarray:
        """The soft-token embeddings of preprocessed images, from the artifact's compiled
        image encoder: [images, tokens, hidden] of pixel values [images, 3, H, W], or
        [tokens of all images, hidden] of merge-unit patches and their index `layout`
        (runtime/multimodal/patch_merge_layout.py)."""
        vision = self.spec.vision
        if vision is None:
            raise ArtifactError("the artifact has no vision tower: it takes text only")
        typed = np.ascontiguousarray(to_dtype(pixel_values, self.manifest.dtype))
        indices = [self.to_device(np.ascontiguousarray(array)) for array in layout]
        encoder = self._function(vision.encoder_function)
        return encoder(self.to_device(typed), *indices, self.params).numpy()

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
            self.to_device,
        )

    def _ragged_mode(self, seq_ids: Sequence[int], lengths: Sequence[int]) -> str:
        """The compiled forward a ragged batch runs: a latent-attention model's cache appends
        one-token steps before attention, so only `decode` reads those right, and a prefill
        over sequences with cached tokens is its `extend`; every other model `prefill`."""
        if self.spec.ragged_dispatch != RAGGED_LATENT:
            return "prefill"
        if all(length == 1 for length in lengths):
            return DECODE
        if any(self.kv_cache.sequence_length(seq_id) for seq_id in seq_ids):
            return "extend"
        return "prefill"

    def run_ragged(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
        suffix: str = "",
        input_hidden: np.ndarray | None = None,
        zeroed_rows: Sequence[int] = (),
        recurrent_slots: Sequence[int] | None = None,
        images: ForwardImages | None = None,
        rope_positions: np.ndarray | None = None,
    ) -> tuple[DeviceLogits, np.ndarray | None, np.ndarray]:
        """One ragged forward through the compiled `{mode}{suffix}` (`_ragged_mode`);
        `input_hidden` [tokens, hidden] goes in after the embeddings (their rows
        `zeroed_rows` zeroed) when the function takes it (a head's). The logits rows at the
        positions (default: each chunk's last token), on the device; the hidden rows the
        function returned [rows, width] (at the positions, or of every token; as wide as
        the function made them), None when it returns none; the int32 positions.
        A hybrid model's forward also takes `recurrent_slots` (`_state_inputs`); with
        `images` their rows' embeddings are replaced and the artifact's image prefill runs
        (model_defs/image_block_attention.py); so it does with `rope_positions` [3, tokens]
        (M-RoPE: model_defs/qwen2_5_vl.py), which it takes instead of the attention bias."""
        lengths, positions, flat = self._ragged_plan(chunks, logit_positions)
        mode = self._ragged_mode(seq_ids, lengths)
        rows_shape = (len(flat), 1) if mode == DECODE else (1, len(flat))
        embeddings = self.embed_tokens(flat)
        if zeroed_rows:
            host = embeddings.numpy()
            host[list(zeroed_rows)] = 0
            embeddings = self.forward_input(host)
        if images is not None:
            host = embeddings.numpy()
            host[images.rows] = to_dtype(images.embeddings, self.manifest.dtype)
            embeddings = self.forward_input(host)
        inputs = [embeddings._create_view((*rows_shape, self.hidden_size))]
        if input_hidden is not None:
            typed = np.ascontiguousarray(to_dtype(input_hidden, self.manifest.dtype))
            inputs.append(self.forward_input(typed.reshape(*rows_shape, -1)))
        if mode != DECODE:
            inputs.append(self.forward_input(positions))
        name = mode + suffix
        if rope_positions is not None:
            name = IMAGE_PREFILL + suffix
            inputs.append(self.forward_input(np.ascontiguousarray(rope_positions, np.int32)))
        elif images is not None:
            name = IMAGE_PREFILL
            bias, rows = image_attention_inputs(lengths, images)
            typed_rows = np.ascontiguousarray(to_dtype(rows, self.manifest.dtype))
            inputs += [self.forward_input(bias), self.forward_input(typed_rows)]
        if name == DECODE and len(flat) == 1 and input_hidden is None and self.spec.decode_single:
            name = "decode_single"
        if isinstance(self.kv_cache, OwnedKVCache):
            logits = self._owned_prefill(name, seq_ids, lengths, inputs)
            return self._device_logits(logits, len(positions)), None, positions
        starts = None if mode == DECODE else [0, *itertools.accumulate(lengths)]
        states = self._state_inputs(recurrent_slots, starts)
        self.kv_cache.begin_forward(seq_ids, lengths)
        call = self._function(name)
        outputs = list(call(*inputs, self.kv_cache.handle, *states, self.params))
        self.kv_cache.end_forward()
        outputs = self._take_back_states(outputs)
        logits = outputs[0]
        if mode == DECODE and not np.array_equal(positions, np.arange(len(flat))):
            logits = self.to_device(logits.numpy().reshape(len(flat), -1)[positions])
        hidden = outputs[1].numpy() if len(outputs) == 3 else None
        if hidden is not None:
            hidden = hidden.reshape(-1, hidden.shape[-1])
        return self._device_logits(logits, len(positions)), hidden, positions

    def _owned_prefill(
        self, name: str, seq_ids: Sequence[int], lengths: Sequence[int], inputs: list[Any]
    ) -> Any:
        """`prefill_owned` of the ragged batch (its embeddings and logit positions in
        `inputs`); the pages are written in place."""
        assert isinstance(self.kv_cache, OwnedKVCache)
        if name != "prefill":
            raise ArtifactError(
                f"the compiled {name!r} runs over TVM's KV cache, and this runner owns its "
                "KV pages; an artifact built without the owned_kv option runs every forward "
                "over TVM's cache"
            )
        self.kv_cache.begin_forward(seq_ids, lengths)
        function, metadata = self.kv_cache.prefill_arguments(self.manifest.functions)
        self._held_inputs.extend(metadata)
        outputs = self._function(function)(*inputs, *metadata, self.kv_cache.pages, self.params)
        self.kv_cache.end_forward()
        # A fresh prefill returns the pages too.
        return outputs[0] if function == OWNED_PREFILL_FRESH else outputs

    def _owned_decode(self, seq_ids: Sequence[int], token_ids: Sequence[int]) -> DeviceLogits:
        """One `decode_owned` step, padded to its bucket: ids 0 and no pages in the padding
        rows, whose logits are never read."""
        assert isinstance(self.kv_cache, OwnedKVCache)
        self._held_inputs.clear()
        self.kv_cache.begin_forward(seq_ids, [1] * len(seq_ids))
        rows, metadata = self.kv_cache.decode_arguments()
        ids = np.zeros(rows, np.int32)
        ids[: len(token_ids)] = token_ids
        single = rows == 1 and OWNED_DECODE_SINGLE in self.manifest.functions
        call = self._function(OWNED_DECODE_SINGLE if single else OWNED_DECODE)
        logits = call(self.forward_input(ids), *metadata, self.kv_cache.pages, self.params)
        self.kv_cache.end_forward()
        return self._device_logits(logits, len(seq_ids))

    def _state_inputs(
        self, recurrent_slots: Sequence[int] | None, seq_starts: list[int] | None
    ) -> list[Any]:
        """The arguments after the KV cache of a hybrid model's forward (ARCHITECTURE.md's
        contract): a prefill's sequence starts, the rows' slots, every layer's conv pools,
        every layer's SSM pools; nothing for a model without recurrent state."""
        if not self.spec.recurrent_state:
            return []
        if recurrent_slots is None or self.recurrent_pool is None:
            raise ValueError("a model with recurrent state needs each sequence's state slot")
        state = self.recurrent_pool.forward_state(recurrent_slots)
        self._held_inputs.append(state.slots)
        starts = (
            [] if seq_starts is None else [self.forward_input(np.asarray(seq_starts, np.int32))]
        )
        return [*starts, state.slots, state.conv_pools, state.ssm_pools]

    def _take_back_states(self, outputs: list[Any]) -> list[Any]:
        """A hybrid forward's outputs without its trailing conv and SSM pools, which the
        state pool holds from now on (`RecurrentStatePool.take_back`)."""
        if not self.spec.recurrent_state:
            return outputs
        assert self.recurrent_pool is not None  # `_state_inputs` checked it
        self.recurrent_pool.take_back(list(outputs[-2]), list(outputs[-1]))
        return outputs[:-2]

    def prefill_logits(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
        recurrent_slots: Sequence[int] | None = None,
        images: ForwardImages | None = None,
        rope_positions: np.ndarray | None = None,
    ) -> DeviceLogits:
        return self.run_ragged(
            seq_ids,
            chunks,
            logit_positions,
            recurrent_slots=recurrent_slots,
            images=images,
            rope_positions=rope_positions,
        )[0]

    def prefill_with_hidden(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
        **forward_inputs: Any,
    ) -> tuple[DeviceLogits, np.ndarray]:
        """`prefill_logits` through the artifact's hidden-states functions, and the hidden
        states of every token of the chunks on the host: the final-norm ones [total, hidden]
        or, for a target built for an EAGLE-3 head, its aux layers' inputs [total, 3 * hidden].
        `forward_inputs`: `run_ragged`'s recurrent_slots, images and rope_positions."""
        if self.spec.hidden_states is None:
            raise ArtifactError(
                f"the artifact has no {HIDDEN_STATES_FUNCTION!r}: build it for drafting from "
                "hidden states (EAGLE, MTP)"
            )
        logits, hidden, _ = self.run_ragged(
            seq_ids, chunks, logit_positions, HIDDEN_SUFFIX, **forward_inputs
        )
        assert hidden is not None  # every `*_hidden` function returns hidden states
        return logits, hidden

    def decode_logits(
        self,
        seq_ids: Sequence[int],
        token_ids: Sequence[int],
        recurrent_slots: Sequence[int] | None = None,
    ) -> DeviceLogits:
        if isinstance(self.kv_cache, OwnedKVCache):
            return self._owned_decode(seq_ids, token_ids)
        batch = len(seq_ids)
        hidden = self.embed_tokens(token_ids)._create_view((batch, 1, self.hidden_size))
        states = self._state_inputs(recurrent_slots, None)
        self.kv_cache.begin_forward(seq_ids, [1] * batch)
        single = batch == 1 and self.spec.decode_single
        call = self._function("decode_single" if single else DECODE)
        outputs = call(hidden, self.kv_cache.handle, *states, self.params)
        self.kv_cache.end_forward()
        logits = self._take_back_states(list(outputs))[0]
        return self._device_logits(logits, batch)
