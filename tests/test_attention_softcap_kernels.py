"""compiler/attention_softcap.py and the capped CPU ragged-prefill kernel, without a model.

Every attention kernel TVM's paged KV cache registers (CPU and CUDA) gets exactly its score
store capped and still parses; its text round-trips unchanged without the cap; an unknown
kernel text fails by name. Numerics: the capped CPU kernels (ours and TVM's rewritten one)
against a numpy softmax over capped scores. End to end against transformers:
tests/test_attention_softcap.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
import tvm.relax.frontend.nn.llm.kv_cache as tvm_kv_cache
from tvm.target import Target

from vllm_tvm.compiler.attention_softcap import (
    CPU_SCORE_STORES,
    GPU_SCORE_STORES,
    AttentionSoftcapError,
    capped_script,
    parseable_script,
    softcap_attention_kernels,
)
from vllm_tvm.schedules.cpu_attention import ragged_prefill_cpu

H_KV, H_Q, D, D_GPU = 2, 4, 16, 64
CAP = 2.5
SM_SCALE = 0.5
RAGGED = "batch_prefill_ragged_kv"


def _cpu_kernels() -> list[tvm.tirx.PrimFunc]:
    """TVM's kernels as its TIR paged KV cache registers them on CPU."""
    kv = tvm_kv_cache
    return [
        kv._attention_prefill_ragged_cpu(H_KV, H_Q, D, D, "float32", {}),
        kv._attention_prefill_cpu(H_KV, H_Q, D, "float32", False, {}),
        kv._attention_prefill_cpu(H_KV, H_Q, D, "float32", True, {}, sliding_window_size=8),
        kv._attention_decode_cpu(H_KV, H_Q, D, "float32", False, {}),
        kv._attention_decode_cpu(H_KV, H_Q, D, "float32", True, {}),
        kv.tree_attn_cpu(H_KV, H_Q, D, "float32", {}),
        kv.tree_attn_with_paged_kv_cache_cpu(H_KV, H_Q, D, "float32", {}),
    ]


def _gpu_kernels() -> list[tvm.tirx.PrimFunc]:
    """TVM's kernels as its TIR paged KV cache registers them on CUDA."""
    kv = tvm_kv_cache
    cuda = Target({"kind": "cuda", "arch": "sm_90a"})
    return [
        kv._attention_prefill_ragged(H_KV, H_Q, D_GPU, D_GPU, "float16", {}, cuda),
        kv._attention_prefill(H_KV, H_Q, D_GPU, "float16", False, {}, cuda),
        kv._attention_prefill(H_KV, H_Q, D_GPU, "float16", True, {}, cuda, sliding_window_size=8),
        kv._attention_decode(H_KV, H_Q, D_GPU, "float16", False, {}, cuda),
        kv._attention_decode(H_KV, H_Q, D_GPU, "float16", True, {}, cuda),
        kv.tree_attn(H_KV, H_Q, D_GPU, "float16", {}, cuda),
        kv.tree_attn_with_paged_kv_cache(H_KV, H_Q, D_GPU, "float16", {}, cuda),
    ]


def _by_symbol(kernels: list[tvm.tirx.PrimFunc]) -> dict[str, tvm.tirx.PrimFunc]:
    return {str(kernel.attrs["global_symbol"]): kernel for kernel in kernels}


@pytest.fixture(scope="module")
def kernels() -> dict[bool, dict[str, tvm.tirx.PrimFunc]]:
    """TVM's kernels by symbol, for CPU (False) and GPU (True)."""
    return {False: _by_symbol(_cpu_kernels()), True: _by_symbol(_gpu_kernels())}


def test_every_kernel_of_the_cache_is_known(kernels) -> None:
    assert set(kernels[False]) == set(CPU_SCORE_STORES)
    assert set(kernels[True]) == set(GPU_SCORE_STORES)


def test_without_a_cap_every_kernel_round_trips_unchanged(kernels) -> None:
    for kernel in [*kernels[False].values(), *kernels[True].values()]:
        reparsed = tvm.script.from_source(parseable_script(kernel.script()))
        assert reparsed.script() == kernel.script()


@pytest.mark.parametrize("gpu", [False, True])
def test_each_kernel_gets_exactly_its_score_store_capped(kernels, gpu: bool) -> None:
    named = kernels[gpu]
    capped = softcap_attention_kernels(tvm.IRModule(dict(named)), CAP, gpu)
    scaled_cap = f"T.float32({CAP * math.log2(math.e)!r})"
    for name, kernel in named.items():
        before = kernel.script().splitlines()
        after = capped[name].script().splitlines()
        added = [line.strip() for line in after if line not in before]
        assert len(added) == 1, name
        assert f"{scaled_cap} * T.tanh(" in added[0], name
        assert len(after) == len(before), name
        assert capped[name].attrs["global_symbol"] == name


def test_an_unknown_kernel_text_is_refused_by_name(kernels) -> None:
    decode = "batch_decode_paged_kv"
    script = kernels[True][decode].script().replace("t0[0]", "t1[0]")
    with pytest.raises(AttentionSoftcapError, match=f"{decode} has 0 score stores"):
        capped_script(decode, GPU_SCORE_STORES[decode], script, CAP)
    with pytest.raises(AttentionSoftcapError, match="none of TVM's paged-attention kernels"):
        softcap_attention_kernels(tvm.IRModule({}), CAP, gpu=False)


# A prompt with a cached prefix and one alone, spanning several of our kernel's key tiles.
Q_LENS, KV_LENS = [5, 37], [9, 37]


def _capped_attention(q, k, v, causal: int):
    """Softmax attention over cap * tanh(q.k * scale / cap) scores, per sequence."""
    out = np.zeros_like(q)
    q_start, kv_start = 0, 0
    for q_len, kv_len in zip(Q_LENS, KV_LENS, strict=True):
        for row in range(q_len):
            visible = kv_len - q_len + row + 1 if causal else kv_len
            for h in range(H_Q):
                keys = k[kv_start : kv_start + visible, h // (H_Q // H_KV)].astype(np.float64)
                values = v[kv_start : kv_start + visible, h // (H_Q // H_KV)].astype(np.float64)
                scores = CAP * np.tanh(
                    keys @ q[q_start + row, h].astype(np.float64) * SM_SCALE / CAP
                )
                weights = np.exp(scores - scores.max())
                out[q_start + row, h] = weights @ values / weights.sum()
        q_start, kv_start = q_start + q_len, kv_start + kv_len
    return out


def _run_ragged(kernel, q, k, v, causal: int) -> np.ndarray:
    device = tvm.cpu()
    q_indptr = np.concatenate([[0], np.cumsum(Q_LENS)]).astype(np.int32)
    kv_indptr = np.concatenate([[0], np.cumsum(KV_LENS)]).astype(np.int32)
    out = tvm.runtime.tensor(np.zeros_like(q), device)
    lse = tvm.runtime.tensor(np.zeros(q.shape[:2], np.float32), device)
    inputs = [q, q_indptr, k, v, kv_indptr, np.zeros(len(q), np.int32), np.zeros(2, np.int32)]
    kernel(
        *(tvm.runtime.tensor(x, device) for x in inputs), out, lse, causal, 0, 1.0, 1e4, SM_SCALE
    )
    return out.numpy()


@pytest.mark.parametrize("causal", [1, 0])
def test_capped_cpu_ragged_kernels_equal_softmax_over_capped_scores(kernels, causal: int) -> None:
    stock = kernels[False][RAGGED]
    module = tvm.IRModule({RAGGED: stock})
    rewritten = softcap_attention_kernels(module, CAP, gpu=False)[RAGGED]
    ours = ragged_prefill_cpu(H_KV, H_Q, D, "float32", CAP)
    rng = np.random.default_rng(causal)
    # Raw scores of several times the cap, so an uncapped kernel is far off.
    q = 3 * rng.standard_normal((sum(Q_LENS), H_Q, D)).astype(np.float32)
    k, v = (rng.standard_normal((sum(KV_LENS), H_KV, D)).astype(np.float32) for _ in range(2))
    expected = _capped_attention(q, k, v, causal)
    uncapped = _run_ragged(tvm.compile(stock, target="llvm"), q, k, v, causal)
    assert np.abs(uncapped - expected).max() > 0.1
    for kernel in (rewritten, ours):
        got = _run_ragged(tvm.compile(kernel, target="llvm"), q, k, v, causal)
        np.testing.assert_allclose(got, expected, atol=2e-5)
