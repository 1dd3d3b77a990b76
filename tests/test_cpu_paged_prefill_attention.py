"""schedules/cpu_paged_prefill_attention.py against float64 numpy (compiled for this machine's
CPU target), and the pass that swaps it into a model's module in place of TVM's kernel.

The batch holds chunks of 1 to 9 query rows and one of 40 over cached contexts from empty to
several key blocks, a partly filled last page, pages scattered in the pool; with and without
the causal flag (row i of n over k keys sees the first k - n + i + 1). Tolerance: outputs
within 1e-5 relative plus 2e-6 absolute of float64, the log2-sum-exp within 2e-5 absolute.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm.relax.frontend.nn.llm.kv_cache as tvm_kv_cache
from test_cpu_decode_attention import EMPTY_LSE, PAGE, _paged

from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules.cpu_paged_prefill_attention import (
    PREFILL_SYMBOL,
    paged_prefill_cpu,
    replace_cpu_paged_prefill,
)

CONTEXTS = [0, 1, 37, 150, 16, 300, 5, 70, 9, 200]
"""Cached keys of each sequence of the batch."""
QUERY_ROWS = [2, 1, 3, 9, 4, 5, 6, 7, 8, 40]
"""Query rows of each sequence's chunk."""


def _reference(q, q_indptr, kv, sm_scale, softcap, causal):
    """float64 softmax attention of each query row over its sequence's visible keys (lse in
    log2 units)."""
    group = q.shape[1] // kv[0].shape[2]
    out, lse = np.zeros(q.shape), np.full(q.shape[:2], EMPTY_LSE)
    for seq, (keys, values) in enumerate(kv):
        rows = q_indptr[seq + 1] - q_indptr[seq]
        for i in range(rows):
            visible = max(len(keys) - rows + i + 1, 0) if causal else len(keys)
            if not visible:
                continue
            row = q_indptr[seq] + i
            for h in range(q.shape[1]):
                k64 = keys[:visible, h // group].astype(np.float64)
                v64 = values[:visible, h // group].astype(np.float64)
                scores = k64 @ q[row, h].astype(np.float64) * sm_scale
                if softcap is not None:
                    scores = softcap * np.tanh(scores / softcap)
                scores *= np.log2(np.e)
                weights = np.exp2(scores - scores.max())
                out[row, h] = weights @ v64 / weights.sum()
                lse[row, h] = scores.max() + np.log2(weights.sum())
    return out, lse


@pytest.mark.parametrize(
    ("h_kv", "h_q", "d", "softcap"),
    [(3, 9, 64, None), (2, 2, 16, None), (2, 16, 128, None), (2, 8, 32, 2.5)],
)
def test_kernel_equals_float64_attention(h_kv, h_q, d, softcap) -> None:
    target = resolve_target("llvm").make_target()
    kernel = tvm.compile(paged_prefill_cpu(h_kv, h_q, d, "float32", PAGE, softcap), target=target)
    rng = np.random.default_rng(h_q * d + 1)
    pool, indptr, order, last, kv = _paged(rng, CONTEXTS, h_kv, d)
    q_indptr = np.concatenate([[0], np.cumsum(QUERY_ROWS)]).astype(np.int32)
    q = (rng.standard_normal((int(q_indptr[-1]), h_q, d)) * 2).astype(np.float32)
    device, sm_scale = tvm.cpu(), d**-0.5
    k_rope, q_rope = np.zeros(len(CONTEXTS), np.int32), np.zeros(len(q), np.int32)
    inputs = [
        tvm.runtime.tensor(x, device)
        for x in (q, q_indptr, pool, indptr, order, last, k_rope, q_rope)
    ]
    for causal in (0, 1):
        out = tvm.runtime.tensor(np.zeros_like(q), device)
        lse = tvm.runtime.tensor(np.zeros(q.shape[:2], np.float32), device)
        kernel(*inputs, out, lse, causal, 0, 1.0, 1e4, sm_scale)
        expected_out, expected_lse = _reference(q, q_indptr, kv, sm_scale, softcap, causal)
        np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-5, atol=2e-6)
        np.testing.assert_allclose(lse.numpy(), expected_lse, rtol=0, atol=2e-5)


def _module(d: int, sliding_window: bool) -> tvm.IRModule:
    stock = tvm_kv_cache._attention_prefill_cpu(2, 4, d, "float32", sliding_window, {})
    return tvm.IRModule({"tir_attention_prefill_cpu": stock})


def test_pass_swaps_the_kernel_and_keeps_its_symbol() -> None:
    module = _module(32, sliding_window=False)
    swapped = replace_cpu_paged_prefill()(module)["tir_attention_prefill_cpu"]
    assert swapped.attrs["global_symbol"] == PREFILL_SYMBOL
    assert "T.parallel" in swapped.script()
    assert "T.parallel" not in module["tir_attention_prefill_cpu"].script()


@pytest.mark.parametrize(("d", "sliding_window"), [(24, False), (32, True)])
def test_pass_keeps_tvms_kernel_where_unsupported(d: int, sliding_window: bool) -> None:
    module = _module(d, sliding_window)
    assert replace_cpu_paged_prefill()(module).same_as(module)
