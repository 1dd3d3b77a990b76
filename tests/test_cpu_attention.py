"""schedules/cpu_attention.py: the CPU ragged-prefill kernel against a numpy softmax attention
and TVM's own kernel, and the pass that swaps it into a model's module."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.relax.frontend.nn.llm._prefill_kernels import _attention_prefill_ragged_cpu

from vllm_tvm.schedules.cpu_attention import (
    KERNEL_NAME,
    ReplaceCPURaggedPrefill,
    ragged_prefill_cpu,
)

H_KV, H_Q, D = 2, 6, 16
SM_SCALE = 0.25
# A prompt with a cached prefix, a prompt alone, and one decode-like row over 70 keys: the
# second spans several key tiles, the third has most of its keys before the first query.
Q_LENS, KV_LENS = [5, 37, 1], [9, 37, 70]


def _reference(q, k, v, q_lens, kv_lens, causal):
    """Plain softmax attention per sequence; lse in log2 units, as the kernels return it."""
    out, lse = np.zeros_like(q), np.zeros(q.shape[:2], np.float32)
    q_start, kv_start = 0, 0
    for q_len, kv_len in zip(q_lens, kv_lens, strict=True):
        for row in range(q_len):
            visible = kv_len - q_len + row + 1 if causal else kv_len
            for h in range(H_Q):
                keys = k[kv_start : kv_start + visible, h // (H_Q // H_KV)].astype(np.float64)
                values = v[kv_start : kv_start + visible, h // (H_Q // H_KV)].astype(np.float64)
                scores = keys @ q[q_start + row, h].astype(np.float64) * SM_SCALE * np.log2(np.e)
                weights = np.exp2(scores - scores.max())
                out[q_start + row, h] = weights @ values / weights.sum()
                lse[q_start + row, h] = scores.max() + np.log2(weights.sum())
        q_start, kv_start = q_start + q_len, kv_start + kv_len
    return out, lse


def _run(kernel, q, k, v, causal):
    device = tvm.cpu()
    q_indptr = np.concatenate([[0], np.cumsum(Q_LENS)]).astype(np.int32)
    kv_indptr = np.concatenate([[0], np.cumsum(KV_LENS)]).astype(np.int32)
    out = tvm.runtime.tensor(np.zeros_like(q), device)
    lse = tvm.runtime.tensor(np.zeros(q.shape[:2], np.float32), device)
    inputs = [q, q_indptr, k, v, kv_indptr, np.zeros(len(q), np.int32), np.zeros(3, np.int32)]
    kernel(
        *(tvm.runtime.tensor(x, device) for x in inputs), out, lse, causal, 0, 1.0, 1e4, SM_SCALE
    )
    return out.numpy(), lse.numpy()


@pytest.fixture(scope="module")
def kernels():
    ours = tvm.compile(ragged_prefill_cpu(H_KV, H_Q, D, "float32"), target="llvm")
    stock = tvm.compile(_attention_prefill_ragged_cpu(H_KV, H_Q, D, D, "float32", {}), "llvm")
    return ours, stock


@pytest.mark.parametrize("causal", [1, 0])
def test_kernel_equals_softmax_attention_and_tvms_kernel(kernels, causal: int) -> None:
    rng = np.random.default_rng(causal)
    q = rng.standard_normal((sum(Q_LENS), H_Q, D)).astype(np.float32)
    k, v = (rng.standard_normal((sum(KV_LENS), H_KV, D)).astype(np.float32) for _ in range(2))
    ours, stock = (_run(kernel, q, k, v, causal) for kernel in kernels)
    expected = _reference(q, k, v, Q_LENS, KV_LENS, causal)
    for got in (ours, stock):
        np.testing.assert_allclose(got[0], expected[0], atol=2e-6)
        np.testing.assert_allclose(got[1], expected[1], atol=2e-5)


def _module_with_stock_kernel(d: int) -> tvm.IRModule:
    stock = _attention_prefill_ragged_cpu(H_KV, H_Q, d, d, "float32", {})
    return tvm.IRModule({KERNEL_NAME: stock.with_attr("global_symbol", "batch_prefill_ragged_kv")})


def test_pass_swaps_the_kernel_and_keeps_its_symbol() -> None:
    module = _module_with_stock_kernel(D)
    swapped = ReplaceCPURaggedPrefill(module)
    kernel = swapped[KERNEL_NAME]
    assert kernel.attrs["tirx.is_scheduled"]
    assert kernel.attrs["global_symbol"] == "batch_prefill_ragged_kv"
    assert "T.parallel" in kernel.script()
    assert "T.parallel" not in module[KERNEL_NAME].script()
    assert "tirx.is_scheduled" not in (module[KERNEL_NAME].attrs or {})  # input left as it was


def test_pass_keeps_tvms_kernel_for_an_unsupported_head_dim() -> None:
    module = _module_with_stock_kernel(12)
    assert ReplaceCPURaggedPrefill(module).same_as(module)
    with pytest.raises(ValueError, match="head dimension 12"):
        ragged_prefill_cpu(H_KV, H_Q, 12, "float32")
