"""The CPU's fused matmuls of GGUF types (quantized, F16, BF16), each against `gguf`.

Oracle: the blocks as a GGUF file stores them, dequantized by `gguf.quants.dequantize`,
times the activations in float64 numpy. The kernel under test reads the same blocks
repacked into planes (checkpoints/gguf_repack.py) and dequantizes them inside the matmul
(model_defs/quant_linear.py) as the CPU schedule lays it out (schedules/cpu_quant_matmul.py):
the single-row GEMV of decode (static one row: the dequantization inlined, register-blocked
features) and the several-row GEMM of prefill (symbolic rows, run at row counts that are not
whole register blocks, over a dequantized tile), at output features that are not a multiple
of the register blocks' 32 and, once per type, at a partial feature block (the plain rule).
"""

from __future__ import annotations

from collections.abc import Callable

import gguf
import numpy as np
import pytest
import tvm
from gguf import GGMLQuantizationType as Q
from gguf_synth import K_QUANT_ROWS
from tvm import te
from tvm.s_tir import dlight as dl

from vllm_tvm.checkpoints.gguf_repack import repack
from vllm_tvm.checkpoints.gguf_weights import RawTensor
from vllm_tvm.checkpoints.weight_formats import FORMATS
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.layers import _nt_matmul
from vllm_tvm.model_defs.quant_linear import QuantWeight
from vllm_tvm.schedules.cpu_matmul import CPUNTMatmul
from vllm_tvm.schedules.cpu_quant_matmul import CPUQuantNTMatmul

Blocks = Callable[[np.random.Generator, int, int], np.ndarray]


def _quantized(qtype: Q) -> Blocks:
    """Rows of normal random values quantized by `gguf.quants.quantize`."""

    def make(rng: np.random.Generator, rows: int, columns: int) -> np.ndarray:
        values = rng.standard_normal((rows, columns), dtype=np.float32) * 0.1
        return np.asarray(gguf.quants.quantize(values, qtype)).view(np.uint8).reshape(rows, -1)

    return make


def _random_k_blocks(qtype: Q) -> Blocks:
    """K-quant rows packed from random integers (gguf cannot quantize these types)."""
    return lambda rng, rows, columns: K_QUANT_ROWS[qtype](rng, rows, columns)[0]


# Per type: its blocks and a row length of whole blocks (five 32-value blocks: not a whole
# number of 64-value reductions; three 256-value super-blocks).
CASES: dict[Q, tuple[Blocks, int]] = {
    Q.Q5_0: (_quantized(Q.Q5_0), 160),
    Q.Q5_1: (_quantized(Q.Q5_1), 160),
    Q.Q2_K: (_random_k_blocks(Q.Q2_K), 768),
    Q.Q3_K: (_random_k_blocks(Q.Q3_K), 768),
    Q.F16: (_quantized(Q.F16), 160),
    Q.BF16: (_quantized(Q.BF16), 160),
}
FEATURES = 48
"""Three FEATURE_BLOCKs of 16: fused, and not a whole number of 32-feature blocks."""
PARTIAL_FEATURES = 40
"""Not a whole number of FEATURE_BLOCKs: the quantized rule declines, the plain rule runs."""
ROW_COUNTS = (2, 5, 7)
"""Prefill rows, none a whole number of the 3-row register blocks but 2 < 3."""


def _weight(qtype: Q, features: int) -> tuple[RawTensor, np.ndarray]:
    """A [features, columns] weight of `qtype`: its stored blocks and gguf's float64 values."""
    make, columns = CASES[qtype]
    data = make(np.random.default_rng(features), features, columns)
    values = gguf.quants.dequantize(data, qtype).reshape(features, columns)
    return RawTensor(data, qtype, (features, columns)), values.astype(np.float64)


def _kernel(qtype: Q, features: int, rows: int | None) -> tvm.runtime.Module:
    """The fused product compiled with the CPU schedule; `rows` None: symbolic rows."""
    fmt, columns = FORMATS[qtype.name.lower()], CASES[qtype][1]
    token_rows = tvm.tirx.Var("seq_len", "int64") if rows is None else rows
    x = te.placeholder((1, token_rows, columns), "float32", name="x")
    planes = [
        te.placeholder(fmt.plane_shape(p, (features, columns)), p.dtype, name=p.name)
        for p in fmt.planes
    ]
    y = _nt_matmul(x, QuantWeight(fmt, (features, columns))._dequantize(planes), "float32")
    func = te.create_prim_func([x, *planes, y]).with_attr("global_symbol", "main")
    target = resolve_target("llvm").make_target()
    with target:
        module = dl.ApplyDefaultSchedule(CPUQuantNTMatmul(), CPUNTMatmul())(
            tvm.IRModule({"main": func})
        )
    fused = "nt_matmul_acc_rf" in module.script()
    assert fused == (features % 16 == 0), "the quantized rule ran where it should not, or not"
    return tvm.compile(module, target=target)["main"]


def _check(kernel: tvm.runtime.Module, raw: RawTensor, values: np.ndarray, rows: int) -> None:
    """One call of `kernel` on `rows` random activation rows against gguf's values."""
    fmt = FORMATS[raw.quant_type.name.lower()]
    planes = repack(raw, fmt)
    x = np.random.default_rng(rows).standard_normal((1, rows, raw.shape[1]), dtype=np.float32)
    out = tvm.runtime.tensor(np.zeros((1, rows, raw.shape[0]), np.float32), tvm.cpu())
    arrays = [x, *(planes[p.name] for p in fmt.planes)]
    kernel(*(tvm.runtime.tensor(a, tvm.cpu()) for a in arrays), out)
    expected = x.astype(np.float64) @ values.T
    # fp32 products and sums: each output within a few fp32 ulps of its absolute sum.
    bound = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(values).T) + 1e-30
    error = np.abs(out.numpy() - expected)
    assert (error <= bound).all(), f"worst error / bound {float((error / bound).max()):.3g}"


@pytest.mark.parametrize("qtype", list(CASES), ids=lambda t: t.name)
def test_decode_gemv_equals_gguf_dequantized_matmul(qtype: Q) -> None:
    raw, values = _weight(qtype, FEATURES)
    _check(_kernel(qtype, FEATURES, rows=1), raw, values, rows=1)


@pytest.mark.parametrize("qtype", list(CASES), ids=lambda t: t.name)
def test_prefill_gemm_equals_gguf_dequantized_matmul(qtype: Q) -> None:
    raw, values = _weight(qtype, FEATURES)
    kernel = _kernel(qtype, FEATURES, rows=None)
    for rows in (1, *ROW_COUNTS):
        _check(kernel, raw, values, rows)


@pytest.mark.parametrize("qtype", list(CASES), ids=lambda t: t.name)
def test_partial_feature_block_equals_gguf_dequantized_matmul(qtype: Q) -> None:
    raw, values = _weight(qtype, PARTIAL_FEATURES)
    kernel = _kernel(qtype, PARTIAL_FEATURES, rows=None)
    for rows in (1, 5):
        _check(kernel, raw, values, rows)
