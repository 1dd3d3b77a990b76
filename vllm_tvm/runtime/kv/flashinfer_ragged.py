"""FlashInfer's ragged prefill as the owned-page prefill's own-chunk product, for an artifact
whose runtime spec says `ragged_attention` `flashinfer` (artifacts/owned_kv.py).

Why the runtime: FlashInfer splits a ragged batch's work on the host (`batch_prefill_plan`,
into workspaces it then reads on the device), once per forward. The prefill functions call
the packed function OWNED_RAGGED_ATTENTION `(q, k, v, q_indptr, out, lse)` for every layer;
this object is that function, running the library's `batch_prefill_ragged_run` on the plan
`plan` made for the forward's rows. The kernels are the ones TVM's FlashInfer cache links
into the library (compiler/attention.py), called with the arguments TVM 0.27's
`FlashInferRaggedPrefillFunc` passes (src/runtime/vm/attn_backend.h): NHD layout, causal,
RoPE off, no sliding window. A prefill is never captured into a CUDA graph, so the plan may
differ on every call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vllm_tvm.artifacts.owned_kv import OWNED_RAGGED_ATTENTION, RAGGED_FLASHINFER
from vllm_tvm.artifacts.runtime_spec import OwnedPagesSpec

PLAN_FUNCTION = "batch_prefill_plan"
RUN_FUNCTION = "batch_prefill_ragged_run"
FLOAT_WORKSPACE_BYTES = 128 << 20
INT_WORKSPACE_BYTES = 8 << 20
"""The workspace sizes TVM's FlashInfer cache allocates for the same kernels."""
_CAUSAL, _NHD, _NO_WINDOW = 1, 0, -1
_ROPE_UNUSED = 1.0
_CUDA_HOST = 3
"""DLPack's kDLCUDAHost: page-locked host memory, which the plan copies from."""


class FlashInferRaggedAttention:
    """The registered own-chunk product of one runner's prefills."""

    def __init__(self, library: Any, tvm: Any, device: Any, spec: OwnedPagesSpec) -> None:
        if spec.q_heads <= 0:
            raise ValueError("the artifact's owned_pages spec names no query heads")
        self._plan_function = library[PLAN_FUNCTION]
        self._run = library[RUN_FUNCTION]
        self._tvm = tvm
        self._spec = spec
        self._sm_scale = float(spec.head_dim) ** -0.5
        self._float_workspace = tvm.runtime.empty((FLOAT_WORKSPACE_BYTES,), "uint8", device)
        self._int_workspace = tvm.runtime.empty((INT_WORKSPACE_BYTES,), "uint8", device)
        pinned = tvm.runtime.device(_CUDA_HOST, 0)
        self._pinned_workspace = tvm.runtime.empty((INT_WORKSPACE_BYTES,), "uint8", pinned)
        self._plan: Any = None

    def plan(self, q_indptr: np.ndarray) -> None:
        """Plan the current forward's ragged product: `q_indptr`, the CSR of its sequences'
        new rows (each row attends to its own sequence's new rows, causally)."""
        indptr = np.ascontiguousarray(q_indptr, np.int32)
        host = self._tvm.runtime.tensor(indptr)
        lengths = self._tvm.runtime.tensor(np.ascontiguousarray(np.diff(indptr), np.int32))
        spec = self._spec
        self._plan = self._plan_function(
            self._float_workspace,
            self._int_workspace,
            self._pinned_workspace,
            host,
            host,
            lengths,
            int(indptr[-1]),
            len(indptr) - 1,
            spec.q_heads,
            spec.kv_heads,
            1,  # page size: a ragged product has none
            False,  # enable_cuda_graph
            spec.head_dim,
            spec.head_dim,
            True,  # causal
            _NO_WINDOW,
            -1,  # fixed_split_size: FlashInfer's choice
            False,  # disable_split_kv
            0,  # num_colocated_ctas
        )

    def __call__(self, q: Any, k: Any, v: Any, q_indptr: Any, out: Any, lse: Any) -> None:
        """OWNED_RAGGED_ATTENTION: out / lse of q's rows over their own k/v rows."""
        if self._plan is None:
            raise RuntimeError("FlashInfer's ragged prefill was called before its plan")
        self._run(
            self._float_workspace,
            self._int_workspace,
            self._plan,
            q,
            k,
            v,
            q_indptr,
            q_indptr,
            out,
            lse,
            _CAUSAL,
            _NHD,
            _NO_WINDOW,
            False,  # enable_pdl
            self._sm_scale,
            _ROPE_UNUSED,
            _ROPE_UNUSED,
        )


def register_ragged_attention(
    spec: OwnedPagesSpec | None, library: Any, tvm: Any, device: Any
) -> FlashInferRaggedAttention | None:
    """For an artifact that needs it, register OWNED_RAGGED_ATTENTION (before the library's
    VM resolves its packed functions) and return it, else None. The registration is
    process-wide: the latest runner's wins (one owned-page runner a process is served)."""
    if spec is None or spec.ragged_attention != RAGGED_FLASHINFER:
        return None
    attention = FlashInferRaggedAttention(library, tvm, device, spec)
    tvm.register_global_func(OWNED_RAGGED_ATTENTION, attention, override=True)
    return attention
