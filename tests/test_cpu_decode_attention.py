"""schedules/cpu_decode_attention.py against float64 numpy (compiled for this machine's CPU
target), and the pass that swaps it into a model's module in place of TVM's kernel.

The batch has an empty sequence, a single cached key, a partly filled last page, and a
context spanning several key blocks, its pages scattered in the pool. Tolerance: outputs
within 1e-5 relative plus 2e-6 absolute of float64, the log2-sum-exp within 2e-5 absolute.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm.relax.frontend.nn.llm.kv_cache as tvm_kv_cache

from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules.cpu_decode_attention import (
    DECODE_SYMBOL,
    paged_decode_cpu,
    replace_cpu_paged_decode,
)

PAGE = 16
CONTEXTS = [0, 1, 37, 150]
"""Cached keys of each sequence of the batch."""
EMPTY_LSE = -5e4
"""What TVM's kernel returns for a sequence without keys (output zeros)."""


def _paged(rng, contexts, h_kv, d):
    """A page pool holding `contexts` keys/values per sequence on shuffled pages, and the
    page table, last-page lengths and the keys/values themselves in order."""
    counts = [-(-n // PAGE) for n in contexts]
    pool = rng.standard_normal((sum(counts) + 2, 2, h_kv, PAGE, d)).astype(np.float32)
    order = rng.permutation(len(pool))[: sum(counts)].astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    last = np.array(
        [n - (c - 1) * PAGE if c else 0 for n, c in zip(contexts, counts, strict=True)], np.int32
    )
    kv = []
    for seq, n in enumerate(contexts):
        pages = pool[order[indptr[seq] : indptr[seq + 1]]]  # [pages, 2, h_kv, PAGE, d]
        rows = pages.transpose(1, 0, 3, 2, 4).reshape(2, -1, h_kv, d)[:, :n]
        kv.append(rows)
    return pool, indptr, order, last, kv


def _reference(q, kv, sm_scale, softcap):
    """float64 softmax attention of each sequence's query over its keys (lse in log2 units)."""
    group = q.shape[1] // kv[0].shape[2]
    out, lse = np.zeros(q.shape), np.full(q.shape[:2], EMPTY_LSE)
    for seq, (keys, values) in enumerate(kv):
        if not len(keys):
            continue
        for h in range(q.shape[1]):
            k64, v64 = keys[:, h // group].astype(np.float64), values[:, h // group]
            scores = k64 @ q[seq, h].astype(np.float64) * sm_scale
            if softcap is not None:
                scores = softcap * np.tanh(scores / softcap)
            scores *= np.log2(np.e)
            weights = np.exp2(scores - scores.max())
            out[seq, h] = weights @ v64.astype(np.float64) / weights.sum()
            lse[seq, h] = scores.max() + np.log2(weights.sum())
    return out, lse


@pytest.mark.parametrize(
    ("h_kv", "h_q", "d", "softcap"),
    [(3, 9, 64, None), (2, 2, 16, None), (2, 16, 128, None), (2, 8, 32, 2.5)],
)
def test_kernel_equals_float64_attention(h_kv, h_q, d, softcap) -> None:
    target = resolve_target("llvm").make_target()
    kernel = tvm.compile(paged_decode_cpu(h_kv, h_q, d, "float32", PAGE, softcap), target=target)
    rng = np.random.default_rng(h_q * d)
    pool, indptr, order, last, kv = _paged(rng, CONTEXTS, h_kv, d)
    q = (rng.standard_normal((len(CONTEXTS), h_q, d)) * 2).astype(np.float32)
    device, sm_scale = tvm.cpu(), d**-0.5
    out = tvm.runtime.tensor(np.zeros_like(q), device)
    lse = tvm.runtime.tensor(np.zeros(q.shape[:2], np.float32), device)
    rope = [np.zeros(len(CONTEXTS), np.int32)] * 2
    inputs = [tvm.runtime.tensor(x, device) for x in (q, pool, indptr, order, last, *rope)]
    kernel(*inputs, out, lse, 0, 1.0, 1e4, sm_scale)
    expected_out, expected_lse = _reference(q, kv, sm_scale, softcap)
    np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(lse.numpy(), expected_lse, rtol=0, atol=2e-5)


def _module(d: int, sliding_window: bool) -> tvm.IRModule:
    stock = tvm_kv_cache._attention_decode_cpu(2, 4, d, "float32", sliding_window, {})
    return tvm.IRModule({"tir_attention_decode_cpu": stock})


def test_pass_swaps_the_kernel_and_keeps_its_symbol() -> None:
    module = _module(32, sliding_window=False)
    swapped = replace_cpu_paged_decode()(module)["tir_attention_decode_cpu"]
    assert swapped.attrs["global_symbol"] == DECODE_SYMBOL
    assert "T.parallel" in swapped.script()
    assert "T.parallel" not in module["tir_attention_decode_cpu"].script()


@pytest.mark.parametrize(("d", "sliding_window"), [(24, False), (32, True)])
def test_pass_keeps_tvms_kernel_where_unsupported(d: int, sliding_window: bool) -> None:
    module = _module(d, sliding_window)
    assert replace_cpu_paged_decode()(module).same_as(module)
