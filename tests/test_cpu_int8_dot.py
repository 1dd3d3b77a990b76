"""The int8-activation products (schedules/cpu_int8_dot.py) against llama.cpp's definition.

Oracle: llama.cpp's quantize-then-dot, written here in numpy from ggml's reference code:
`quantize_row_q8_0_ref` (d = max|x| / 127, q = roundf(x * (1 / d)), d stored as fp16) and
`ggml_vec_dot_q8_0_q8_0` / `ggml_vec_dot_q4_0_q8_0` (per block: the integer sum of the
products times fp16(d_w) * fp16(d_x), summed); for Q4_1 / Q5_1, `quantize_row_q8_1_ref` (the
same values and scale, and s = fp16(d * sum(q)) with d unrounded) and
`ggml_vec_dot_q4_1_q8_1` / `ggml_vec_dot_q5_1_q8_1` (per block, the same term plus
fp16(m_w) * fp16(s_x)); Q5_0 multiplies Q8_0 activations as Q4_0 does, its values taking
a fifth bit each, offset 16. The weights are blocks `gguf.quants.quantize`
wrote, read from their bytes here; the kernels read them repacked into planes. Against the
float path (gguf's dequantized weights times the unquantized activations) the difference is
the activations' quantization error, bounded below.
"""

from __future__ import annotations

from collections.abc import Callable

import gguf
import numpy as np
import pytest
import tvm
from gguf import GGMLQuantizationType as Q
from tvm.target import Target

from vllm_tvm.checkpoints.gguf_repack import repack
from vllm_tvm.checkpoints.gguf_weights import RawTensor
from vllm_tvm.checkpoints.weight_formats import FORMATS
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules.cpu_int8_dot import (
    AVX2,
    SDOT,
    VNNI,
    int8_dot_isa,
    int8_gemv,
    quantize_activations,
)
from vllm_tvm.schedules.cpu_int8_gemm import int8_gemm, lane_features

ROWS, FEATURES, COLUMNS = 11, 48, 160
"""Rows: one register block of `int8_gemm`'s eight and three rows more (not a multiple of
2 or 4 either); features: three of its tiles; five 32-value blocks per row."""

KERNELS = {
    "gemv": int8_gemv,
    "gemm": int8_gemm,
    "gemm_3x2": lambda *args: int8_gemm(*args, token_rows=3, features_per_block=2),
}
"""The product kernels, each with the same definition: one output at a time, and register
blocks of rows x features (the default, whose eight features' sums fold into a register
through neighbours then halves, and a smaller one that folds two features once)."""


@pytest.mark.parametrize(
    ("target", "isa"),
    [
        ({"kind": "llvm", "mcpu": "cascadelake"}, VNNI),
        ({"kind": "llvm", "mcpu": "alderlake"}, VNNI),
        ({"kind": "llvm", "mcpu": "skylake-avx512"}, AVX2),
        ({"kind": "llvm", "mcpu": "znver3"}, AVX2),
        ({"kind": "llvm", "mcpu": "sandybridge"}, None),
        ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon", "+dotprod"]}, SDOT),
        ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}, None),
    ],
)
def test_isa_follows_the_target_features(target: dict, isa: str | None) -> None:
    assert int8_dot_isa(Target(target)) == isa


def _quantize_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's quantize_row_q8_0_ref on each row: (int8 values, fp16 scales)."""
    blocks = x.reshape(x.shape[0], -1, 32)
    d = np.abs(blocks).max(axis=-1) / np.float32(127)
    inverse = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    scaled = blocks * inverse[..., None]
    rounded = np.trunc(scaled + np.copysign(np.float32(0.5), scaled))  # roundf
    return rounded.astype(np.int8).reshape(x.shape), d.astype(np.float16)


def _block_sums_reference(x: np.ndarray) -> np.ndarray:
    """quantize_row_q8_1_ref's s on each row: fp16(sum(q) * d), d the fp32 scale."""
    q, _ = _quantize_reference(x)
    d = np.abs(x.reshape(x.shape[0], -1, 32)).max(axis=-1) / np.float32(127)
    total = q.reshape(x.shape[0], -1, 32).astype(np.int32).sum(axis=-1)
    return (total.astype(np.float32) * d).astype(np.float16)


def _weight_blocks(qtype: Q) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """gguf-quantized weight rows from their bytes: (integer values in value order, fp16
    scales, fp16 mins: zero but for Q4_1 / Q5_1), as ggml's block_q*_* lay them out."""
    data = np.asarray(gguf.quants.quantize(_float_weights(), qtype)).view(np.uint8)
    blocks = data.reshape(FEATURES, COLUMNS // 32, -1)
    d = blocks[:, :, 0:2].copy().view(np.float16)[..., 0]
    m = np.zeros_like(d)
    if qtype == Q.Q8_0:
        q = blocks[:, :, 2:34].copy().view(np.int8).astype(np.int64)
    else:  # low nibbles are values 0-15, high nibbles 16-31
        start = 2
        if qtype in (Q.Q4_1, Q.Q5_1):  # fp16 m after d, no offset
            m = blocks[:, :, 2:4].copy().view(np.float16)[..., 0]
            start = 4
        fifth = np.zeros((FEATURES, COLUMNS // 32, 32), np.int64)
        if qtype in (Q.Q5_0, Q.Q5_1):  # then qh: bit v of a little-endian uint32 is value v's
            qh = blocks[:, :, start : start + 4].copy().view("<u4")[..., 0].astype(np.int64)
            fifth = ((qh[..., None] >> np.arange(32)) & 1) << 4
            start += 4
        nibbles = blocks[:, :, start : start + 16]
        q = np.concatenate([nibbles & 15, nibbles >> 4], axis=-1).astype(np.int64) + fifth
        q -= {Q.Q4_0: 8, Q.Q5_0: 16}.get(qtype, 0)
    return q.reshape(FEATURES, COLUMNS), d, m


def _activations() -> np.ndarray:
    x = np.random.default_rng(2).standard_normal((ROWS, COLUMNS), dtype=np.float32)
    x[1, 32:64] = 0  # a block of zeros: scale 0, values 0
    x[2, 70] = 2.5 * np.abs(x[2, 64:96]).max()  # an outlier: most of its block rounds to 0
    # Scale exactly 1: halves, which roundf takes away from zero (nearest-even would not).
    x[0, 0:8] = [127, 2.5, -2.5, 0.5, -0.5, 1.5, -3.5, 126.5]
    return x


def _run(
    func: tvm.tirx.PrimFunc, target: Target, arrays: list[np.ndarray]
) -> tuple[list[np.ndarray], str]:
    """`func` compiled and called on `arrays`: the arrays after the call, and its assembly."""
    library = tvm.compile(tvm.IRModule({"main": func}), target=target)
    tensors = [tvm.runtime.tensor(a, tvm.cpu()) for a in arrays]
    library["main"](*tensors)
    return [t.numpy() for t in tensors], library.mod.inspect_source("asm")


def test_activations_are_quantized_as_llama_cpp_does() -> None:
    x = _activations()
    q, d = np.zeros(x.shape, np.int8), np.zeros((ROWS, COLUMNS // 32), np.float16)
    target = resolve_target("llvm").make_target()
    (_, got_q, got_d), _ = _run(quantize_activations(ROWS, COLUMNS), target, [x, q, d])
    want_q, want_d = _quantize_reference(x)
    assert list(want_q[0, 0:8]) == [127, 3, -3, 1, -1, 2, -4, 127]
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_d, want_d)
    assert (want_q[1, 32:64] == 0).all() and want_d[1, 1] == 0


def test_activations_are_quantized_with_block_sums_as_llama_cpp_q8_1_does() -> None:
    x = _activations()
    arrays = [x, np.zeros(x.shape, np.int8), *np.zeros((2, ROWS, COLUMNS // 32), np.float16)]
    target = resolve_target("llvm").make_target()
    (_, got_q, got_d, got_s), _ = _run(quantize_activations(ROWS, COLUMNS, True), target, arrays)
    want_q, want_d = _quantize_reference(x)
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_d, want_d)
    np.testing.assert_array_equal(got_s, _block_sums_reference(x))
    assert got_s[1, 1] == 0
    # s rounds the fp32 d * sum(q), not the stored fp16 d's product: they differ somewhere.
    stored = want_q.reshape(ROWS, -1, 32).sum(axis=-1) * want_d.astype(np.float32)
    assert (stored.astype(np.float16) != got_s).any()


def _isas_here() -> list[str]:
    """Each ISA this machine can run (AVX2 through a target without VNNI)."""
    native = int8_dot_isa(resolve_target("llvm").make_target())
    return [isa for isa in (VNNI, AVX2) if native == VNNI or isa == native]


def _target_for(isa: str) -> Target:
    native = resolve_target("llvm").make_target()
    return native if isa == VNNI else Target({"kind": "llvm", "mcpu": "haswell"})


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("isa", _isas_here())
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1], ids=lambda t: t.name)
def test_product_equals_llama_cpp_quantize_then_dot(qtype: Q, isa: str, kernel: str) -> None:
    func = KERNELS[kernel](qtype.name.lower(), ROWS, FEATURES, COLUMNS, isa)

    def run(arrays: list[np.ndarray]) -> np.ndarray:
        (*_, got), assembly = _run(func, _target_for(isa), arrays)
        assert ("vpdpbusd" if isa == VNNI else "vpmaddubsw") in assembly
        return got

    check_product_against_llama_cpp(qtype, run)


def check_product_against_llama_cpp(
    qtype: Q, run: Callable[[list[np.ndarray]], np.ndarray]
) -> None:
    """`run` (a product kernel of `qtype` called on its arguments: the reference's quantized
    activations, the weight planes, a zero output; returning the output) against llama.cpp's
    quantize-then-dot, and against the float path within the activations' rounding."""
    x = _activations()
    xq, xd = _quantize_reference(x)
    xs = _block_sums_reference(x)
    wq, wd, wm = _weight_blocks(qtype)
    data = np.asarray(gguf.quants.quantize(_float_weights(), qtype)).view(np.uint8)
    w = gguf.quants.dequantize(data, qtype).reshape(FEATURES, COLUMNS).astype(np.float64)
    # The weights read from the bytes are gguf's: d * q + m (fp32-rounded).
    scaled = np.repeat(wd.astype(np.float64), 32, axis=1) * wq
    mins = np.repeat(wm.astype(np.float64), 32, axis=1)
    np.testing.assert_allclose(scaled + mins, w, rtol=1e-6, atol=0)
    # The definition: per block, integer sum times fp16(d_w) * fp16(d_x) (exact in fp32),
    # plus fp16(m_w) * fp16(s_x) (exact in fp32; zero without mins).
    sums = (wq.reshape(FEATURES, 1, -1, 32) * xq.reshape(1, ROWS, -1, 32)).sum(axis=-1)
    scales = wd.astype(np.float32)[:, None, :] * xd.astype(np.float32)[None, :, :]
    offsets = wm.astype(np.float32)[:, None, :] * xs.astype(np.float32)[None, :, :]
    terms = sums * scales.astype(np.float64), offsets.astype(np.float64)
    expected = (terms[0] + terms[1]).sum(axis=-1).T
    fmt = FORMATS[qtype.name.lower()]
    planes = repack(RawTensor(data.reshape(FEATURES, -1), qtype, (FEATURES, COLUMNS)), fmt)
    out = np.zeros((ROWS, FEATURES), np.float32)
    weights = [planes[plane.name] for plane in fmt.planes]
    sums_if_needed = [xs] if "m" in planes else []
    got = run([xq, xd, *sums_if_needed, *weights, out])
    # fp32 products and sums of exact partial sums (a block's lanes, in an order each
    # kernel picks): within a few ulps of the sum of the products' magnitudes.
    magnitudes = np.abs(wq).reshape(FEATURES, 1, -1, 32) * np.abs(xq).reshape(1, ROWS, -1, 32)
    magnitudes = magnitudes.sum(axis=-1) * np.abs(scales.astype(np.float64))
    bound = 1e-6 * (magnitudes + np.abs(terms[1])).sum(axis=-1).T
    assert (np.abs(got - expected) <= bound).all()
    # Against the float path: each activation is off by at most d_x (1/2 + 127 * 2**-11)
    # (rounding to an int8 step, the scale rounded to fp16), times |d_w q_w| + |m_w|; with
    # mins, s's fp16 rounding adds up to |m * s| * 2**-11 a block.
    bound = bound + (np.abs(terms[1]) * 2.0**-11).sum(axis=-1).T
    float_path = x.astype(np.float64) @ w.T
    step = np.repeat(xd.astype(np.float64), 32, axis=1) * (0.5 + 127 * 2.0**-11)
    quantization_bound = step @ (np.abs(scaled) + np.abs(mins)).T + bound
    assert (np.abs(got - float_path) <= quantization_bound).all()


def _float_weights() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((FEATURES, COLUMNS), dtype=np.float32)


def test_other_formats_are_refused_by_name() -> None:
    with pytest.raises(
        ValueError, match=r"no int8 dot product for 'q2_k'; supported: q8_0, q4_0, q4_1, q5_0, q5_1"
    ):
        int8_gemv("q2_k", 1, 16, 32, VNNI)


def test_gemm_refuses_features_outside_whole_tiles_by_name() -> None:
    with pytest.raises(ValueError, match=r"output features \(40\) in whole tiles of 16"):
        int8_gemm("q8_0", 8, 40, 64, VNNI)


@pytest.mark.parametrize(
    ("count", "lanes", "want"),
    [
        (8, 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        (4, 8, [0, 1, 2, 3, 0, 1, 2, 3]),  # vphaddd's layout: each feature once per half
        (2, 8, [0, 0, 1, 1, 0, 0, 1, 1]),
        (4, 4, [0, 1, 2, 3]),
    ],
)
def test_feature_sums_fold_into_the_lanes_vphaddd_gives(
    count: int, lanes: int, want: list[int]
) -> None:
    assert lane_features(count, lanes) == want
