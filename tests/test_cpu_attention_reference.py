"""schedules/cpu_attention.py and schedules/vector_math.py against float64 numpy, compiled for
this machine's CPU target (the vector width the models get).

The attention cases cover what the kernel does: ragged batches (a cached prefix, a single
decode-like row, prompts spanning several query tiles and key blocks), causal and full
masks, grouped queries (1, 3, 5 and 8 query heads per key/value head: 5 leaves unused lanes
in a tile; 4 with the cap), head dimensions 16 to 128, soft-capped scores, and peaked
softmaxes. Tolerance: outputs within 1e-5 relative plus 2e-6 absolute of float64 (fp32
accumulation over up to 150 keys), the log2-sum-exp within 2e-5 absolute.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules import vector_math
from vllm_tvm.schedules.cpu_attention import ragged_prefill_cpu

# (query lengths, key/value lengths) per sequence of a batch
BATCH = ([70, 1, 33, 5], [70, 45, 150, 9])


@pytest.fixture(scope="module")
def target() -> tvm.target.Target:
    return resolve_target("llvm").make_target()


def _reference(q, k, v, q_lens, kv_lens, causal, sm_scale, softcap):
    """float64 softmax attention per sequence; lse in log2 units, as the kernel returns it."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    out, lse = np.zeros(q.shape), np.zeros(q.shape[:2])
    q_start, kv_start = 0, 0
    for q_len, kv_len in zip(q_lens, kv_lens, strict=True):
        for row in range(q_len):
            visible = kv_len - q_len + row + 1 if causal else kv_len
            for h in range(q.shape[1]):
                keys = k[kv_start : kv_start + visible, h // group]
                values = v[kv_start : kv_start + visible, h // group]
                scores = keys @ q[q_start + row, h] * sm_scale
                if softcap is not None:
                    scores = softcap * np.tanh(scores / softcap)
                scores *= np.log2(np.e)
                weights = np.exp2(scores - scores.max())
                out[q_start + row, h] = weights @ values / weights.sum()
                lse[q_start + row, h] = scores.max() + np.log2(weights.sum())
        q_start, kv_start = q_start + q_len, kv_start + kv_len
    return out, lse


def _run(kernel, q, k, v, q_lens, kv_lens, causal, sm_scale):
    device = tvm.cpu()
    q_indptr = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    kv_indptr = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    out = tvm.runtime.tensor(np.zeros_like(q), device)
    lse = tvm.runtime.tensor(np.zeros(q.shape[:2], np.float32), device)
    rope = [np.zeros(len(q), np.int32), np.zeros(len(q_lens), np.int32)]
    inputs = [q, q_indptr, k, v, kv_indptr, *rope]
    arguments = [tvm.runtime.tensor(x, device) for x in inputs]
    kernel(*arguments, out, lse, causal, 0, 1.0, 1e4, sm_scale)
    return out.numpy(), lse.numpy()


@pytest.mark.parametrize(
    ("h_kv", "h_q", "d", "causal", "softcap", "peak"),
    [
        (3, 9, 64, 1, None, 1.0),  # SmolLM2's shape
        (3, 9, 64, 0, None, 1.0),
        (2, 2, 16, 1, None, 4.0),  # one query head per key/value head, peaked softmax
        (1, 5, 32, 1, None, 1.0),  # a tile with unused lanes
        (2, 16, 128, 1, None, 1.0),
        (2, 8, 32, 1, 2.5, 3.0),  # soft-capped scores (Gemma 2)
        (2, 8, 32, 0, 2.5, 3.0),
    ],
)
def test_kernel_equals_float64_attention(target, h_kv, h_q, d, causal, softcap, peak) -> None:
    kernel = tvm.compile(ragged_prefill_cpu(h_kv, h_q, d, "float32", softcap), target=target)
    q_lens, kv_lens = BATCH
    rng = np.random.default_rng(h_q * d + causal)
    q = (rng.standard_normal((sum(q_lens), h_q, d)) * peak).astype(np.float32)
    k, v = (rng.standard_normal((sum(kv_lens), h_kv, d)).astype(np.float32) for _ in range(2))
    sm_scale = d**-0.5
    out, lse = _run(kernel, q, k, v, q_lens, kv_lens, causal, sm_scale)
    expected_out, expected_lse = _reference(q, k, v, q_lens, kv_lens, causal, sm_scale, softcap)
    np.testing.assert_allclose(out, expected_out, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(lse, expected_lse, rtol=0, atol=2e-5)


N = 1 << 16


@T.prim_func(s_tir=True)
def _exp2_and_tanh(
    x: T.Buffer((N,), "float32"), exp2: T.Buffer((N,), "float32"), tanh: T.Buffer((N,), "float32")
):
    T.func_attr({"tirx.is_scheduled": True})
    for outer in T.serial(N // 16):
        for lane in T.vectorized(16):
            exp2[outer * 16 + lane] = vector_math.exp2(x[outer * 16 + lane])
            tanh[outer * 16 + lane] = vector_math.tanh(x[outer * 16 + lane])


def test_vector_exp2_and_tanh_against_float64(target) -> None:
    kernel = tvm.compile(_exp2_and_tanh, target=target)
    x = np.concatenate([np.linspace(-140, 130, N // 2), np.linspace(-4, 4, N // 2)]).astype(
        np.float32
    )
    device = tvm.cpu()
    buffers = [tvm.runtime.tensor(a, device) for a in (x, np.zeros_like(x), np.zeros_like(x))]
    kernel(*buffers)
    exp2, tanh = (buffer.numpy().astype(np.float64) for buffer in buffers[1:])
    exact = np.exp2(x.astype(np.float64))
    normal = (exact >= 2.0**-126) & (exact < 2.0**127)
    assert np.abs(exp2[normal] / exact[normal] - 1).max() < 2.5e-7
    assert np.all(exp2[x <= -126.5] == 0)  # a masked score weighs exactly nothing
    assert np.abs(exp2[~normal & (x < 0)]).max() <= 2.0**-126
    assert np.abs(tanh - np.tanh(x.astype(np.float64))).max() < 2e-7
