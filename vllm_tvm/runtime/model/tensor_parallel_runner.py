"""Runs a tensor-parallel artifact on N ranks through a TVM disco session.

Why a separate runner: every rank runs the same compiled functions on its own slice of the
weights and its own KV heads, and the ranks meet in the all-reduces the model calls
(model_defs/tensor_parallel.py). The session's workers are the ranks; this runner, on the
controller thread, broadcasts each call to all of them and reads the logits of rank 0
(every rank computes the same ones), so the engine above sees the runner interface
of runner_interface.py unchanged and samples as with one device.

Ranks are the threads of a `ThreadedSession`: on the CPU they exchange tensors through the
CPU stand-in for NCCL (cpu_ccl.py); on CUDA through NCCL, which needs TVM's NCCL binding
(absent from this TVM build: refused by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from vllm_tvm.artifacts.manifest import LIBRARY_NAME, ArtifactError, Manifest, read_manifest
from vllm_tvm.checkpoints.shard_slices import rank_reader
from vllm_tvm.runtime.kv.kv_cache import COMPILED_PAGE_SIZE, PagedKVCache
from vllm_tvm.runtime.model.artifact_fit import check_runs_on
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.weights.loader import assemble_param, open_weights

NCCL_INIT = "runtime.disco.nccl.init_ccl"


def _start_session(tvm: Any, device: str, shards: int) -> Any:
    """A threaded session of `shards` workers with its CCL initialised."""
    from tvm.runtime.disco import ThreadedSession, _ffi_api

    from vllm_tvm.runtime.model.cpu_ccl import CPU_CCL, register_cpu_ccl

    if device == "cuda" and tvm.get_global_func(NCCL_INIT, allow_missing=True) is None:
        raise RuntimeError(
            "tensor parallelism on CUDA needs TVM's NCCL binding "
            f"({NCCL_INIT}), which this TVM build lacks"
        )
    session = ThreadedSession(num_workers=shards)
    if device == "cuda":
        session.init_ccl("nccl", *range(shards))
    else:
        register_cpu_ccl()
        _ffi_api.SessionInitCCL(session, CPU_CCL, tvm.runtime.ShapeTuple(list(range(shards))))
    return session


class TensorParallelRunner(Runner):
    """A tensor-parallel artifact loaded on `shards` ranks (logits come from rank 0 and are
    sampled on the host)."""

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
        manifest: Manifest | None = None,
    ) -> None:
        from vllm_tvm.runtime.tvm_runtime import load_runtime

        tvm = load_runtime(require_cuda=device == "cuda")
        artifact_dir = Path(artifact_dir)
        self.manifest = manifest or read_manifest(artifact_dir)
        plan = self.manifest.tensor_parallel
        if plan is None:
            raise ArtifactError(f"artifact {artifact_dir} was not compiled tensor-parallel")
        check_runs_on(self.manifest, artifact_dir, device, runs_recurrent_state=False)
        self.spec = self.manifest.runtime
        self.shards = int(plan["shards"])
        self._tvm = tvm
        self.device = tvm.cpu(0) if device == "cpu" else tvm.cuda(0)
        self.session = _start_session(tvm, device, self.shards)
        worker_device = tvm.cpu(0) if device == "cpu" else None  # None: each worker's GPU
        module = self.session.load_vm_module(str(artifact_dir / LIBRARY_NAME), worker_device)
        self.params = self._load_rank_params(plan, model_path, show_progress)
        self._settle_sizes(
            max_model_len, max_batch_size, prefill_chunk_size, page_size, max_total_seq_len
        )
        self._create_kv_cache = module["create_kv_cache"]
        self.kv_cache = self._new_kv_cache()
        self._embed = module["embed"]
        self._prefill = module["prefill"]
        self._decode = module["decode"]
        self._decode_single = module["decode_single"]
        self._reshape = self.session.get_global_func("vm.builtin.reshape")
        self._first = self.session.get_global_func("vm.builtin.tuple_getitem")

    def _load_rank_params(self, plan: dict[str, Any], model_path: str | Path, show: bool) -> Any:
        """Every rank's parameters, each rank reading only its slices of the checkpoint; on
        the workers, the parameter array the compiled functions take."""
        source = open_weights(model_path, self.manifest.quantization)
        readers = [rank_reader(plan, source, rank) for rank in range(self.shards)]
        uploaded = []
        for entry in tqdm(self.manifest.params, desc="load weights", disable=not show):
            remote = self.session.empty(tuple(entry.shape), entry.dtype)
            for rank, read in enumerate(readers):
                remote.debug_copy_from(rank, assemble_param(entry, source, read))
            uploaded.append(remote)
        return self.session.call_packed(self.session.get_global_func("ffi.Array"), *uploaded)

    def _builtin(self, name: str) -> Any:
        """`vm.builtin.<name>` run on every rank; the value is rank 0's."""
        function = self.session.get_global_func(f"vm.builtin.{name}")
        return lambda *args: function(*args).debug_get_from_remote(0)

    def _new_kv_cache(self) -> PagedKVCache:
        """An empty KV cache on every rank."""
        return PagedKVCache(self._create_kv_cache, self.kv_config, self._builtin)

    @property
    def can_sample_on_device(self) -> bool:
        return False  # rank 0's logits are copied to the host

    def _on_ranks(self, array: np.ndarray) -> Any:
        """`array` copied to every rank."""
        remote = self.session.empty(array.shape, str(array.dtype))
        for rank in range(self.shards):
            remote.debug_copy_from(rank, array)
        return remote

    def _embedded(self, token_ids: Sequence[int], shape: tuple[int, int, int]) -> Any:
        ids = self._on_ranks(np.asarray(token_ids, dtype=np.int32))
        shape_tuple = self._tvm.runtime.ShapeTuple(list(shape))
        return self._reshape(self._embed(ids, self.params), shape_tuple)

    def _rank0_logits(self, outputs: Any, rows: int) -> DeviceLogits:
        logits = self._first(outputs, 0).debug_get_from_remote(0)
        host = self._tvm.runtime.tensor(logits.numpy().reshape(rows, self.vocab_size))
        return DeviceLogits(host, None, None, self._tvm.runtime.tensor)

    def prefill_logits(
        self,
        seq_ids: Sequence[int],
        chunks: Sequence[Sequence[int]],
        logit_positions: Sequence[int] | None = None,
    ) -> DeviceLogits:
        """Every ragged batch runs `prefill`, on every rank."""
        lengths, positions, flat = self._ragged_plan(chunks, logit_positions)
        hidden = self._embedded(flat, (1, len(flat), self.hidden_size))
        self.kv_cache.begin_forward(seq_ids, lengths)
        outputs = self._prefill(
            hidden, self._on_ranks(positions), self.kv_cache.handle, self.params
        )
        self.kv_cache.end_forward()
        return self._rank0_logits(outputs, len(positions))

    def decode_logits(self, seq_ids: Sequence[int], token_ids: Sequence[int]) -> DeviceLogits:
        """`decode` (`decode_single` for one sequence), on every rank."""
        batch = len(seq_ids)
        hidden = self._embedded(token_ids, (batch, 1, self.hidden_size))
        self.kv_cache.begin_forward(seq_ids, [1] * batch)
        forward = self._decode_single if batch == 1 else self._decode
        outputs = forward(hidden, self.kv_cache.handle, self.params)
        self.kv_cache.end_forward()
        return self._rank0_logits(outputs, batch)
