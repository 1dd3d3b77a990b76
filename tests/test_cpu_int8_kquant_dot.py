"""The K-quant int8 products (schedules/cpu_int8_kquant_dot.py) against llama.cpp's definition.

Oracle: llama.cpp's quantize-then-dot, written here in numpy from ggml's reference code:
`quantize_row_q8_K_ref` (per 256 values: v the first of largest magnitude, iscale =
-127 / v, q = min(127, nearest_int(iscale * x)) with halves to even, d = 1 / iscale in
fp32, bsums the sums of each 16 q) and `ggml_vec_dot_q4_K_q8_K` / `..._q5_K_q8_K` /
`..._q6_K_q8_K` (per super-block: fp32(d_w * d_x) times the integer sum over sub-blocks of
scale times the sub-block's products, less fp32(dmin_w * d_x) times the integer sum of
mins times bsums; Q6_K's values less 32). The weights are random blocks built in the ggml
layout by gguf_synth.py (gguf cannot write K-quants), read from their bytes here and
checked to dequantize as `gguf.quants.dequantize` does; the kernels read them repacked.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf_synth import q2_k_rows, q3_k_rows, q4_k_rows, q5_k_rows, q6_k_rows
from test_cpu_int8_dot import _isas_here, _run, _target_for

from vllm_tvm.checkpoints.gguf_repack import repack
from vllm_tvm.checkpoints.gguf_weights import RawTensor
from vllm_tvm.checkpoints.weight_formats import FORMATS
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules.cpu_int8_dot import _EVEN_THEN_ODD, VNNI
from vllm_tvm.schedules.cpu_int8_kquant_dot import int8_kquant_gemv, quantize_activations_q8_k

ROWS, FEATURES, COLUMNS = 3, 24, 768
"""Three 256-value super-blocks per row; features not a multiple of a vector of outputs."""

BUILDERS = {
    Q.Q4_K: q4_k_rows,
    Q.Q5_K: q5_k_rows,
    Q.Q6_K: q6_k_rows,
    Q.Q3_K: q3_k_rows,
    Q.Q2_K: q2_k_rows,
}
SUB_BLOCK = {Q.Q4_K: 32, Q.Q5_K: 32, Q.Q6_K: 16, Q.Q3_K: 16, Q.Q2_K: 16}
"""Values per integer scale (and min)."""
OFFSET = {Q.Q6_K: 32, Q.Q3_K: 4}
"""What the formats without mins subtract from their unsigned values."""
STORED_ORDER = np.array(
    [v for group in range(COLUMNS // 32) for v in group * 32 + np.array(_EVEN_THEN_ODD)]
)
"""The value each stored activation is: even values first in each 32."""


def quantize_q8_k_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ggml's quantize_row_q8_K_ref on each row: (int8 values in value order, fp32 d per
    256, int16 bsums per 16)."""
    blocks = x.reshape(x.shape[0], -1, 256)
    first_largest = np.abs(blocks).argmax(axis=-1)
    largest = np.take_along_axis(blocks, first_largest[..., None], axis=-1)[..., 0]
    nonzero = largest != 0
    iscale = np.where(nonzero, np.float32(-127) / np.where(nonzero, largest, 1), 0)
    iscale = iscale.astype(np.float32)
    scaled = (blocks * iscale[..., None]).astype(np.float32)
    q = np.minimum(np.rint(scaled), 127).astype(np.int8)  # nearest_int: halves to even
    d = np.where(nonzero, np.float32(1) / np.where(nonzero, iscale, 1), 0).astype(np.float32)
    bsums = q.reshape(x.shape[0], -1, 16).astype(np.int32).sum(axis=-1).astype(np.int16)
    return q.reshape(x.shape), d, bsums


def _scales_and_mins(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's get_scale_min_k4 on bytes 4-15 of Q4_K / Q5_K blocks: 8 scales, 8 mins."""
    q = blocks[..., 4:16].astype(np.int64)
    scales = np.concatenate([q[..., 0:4] & 63, (q[..., 8:12] & 15) | ((q[..., 0:4] >> 6) << 4)], -1)
    mins = np.concatenate([q[..., 4:8] & 63, (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 6) << 4)], -1)
    return scales, mins


def _fp16(blocks: np.ndarray, offset: int) -> np.ndarray:
    return blocks[..., offset : offset + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _decode(data: np.ndarray, qtype: Q) -> dict[str, np.ndarray]:
    """The fields of ggml blocks [features, supers, bytes], values in value order: u the
    unsigned values, sc per sub-block, and for Q2_K / Q4_K / Q5_K mn and dmin."""
    blocks = data.reshape(FEATURES, COLUMNS // 256, -1).astype(np.int64)
    if qtype in (Q.Q2_K, Q.Q3_K):
        return _decode_crumbs(blocks, qtype)
    if qtype == Q.Q6_K:
        ql, qh = blocks[..., 0:128], blocks[..., 128:192]
        u = np.zeros((*blocks.shape[:2], 256), np.int64)
        for half in range(2):
            low, high = ql[..., 64 * half : 64 * half + 64], qh[..., 32 * half : 32 * half + 32]
            for quarter, (nibbles, shift) in enumerate(
                [
                    (low[..., :32] & 15, 0),
                    (low[..., 32:] & 15, 2),
                    (low[..., :32] >> 4, 4),
                    (low[..., 32:] >> 4, 6),
                ]
            ):
                start = 128 * half + 32 * quarter
                u[..., start : start + 32] = nibbles | (((high >> shift) & 3) << 4)
        sc = blocks[..., 192:208].astype(np.uint8).view(np.int8).astype(np.int64)
        return {"u": u, "sc": sc, "d": _fp16(blocks.astype(np.uint8), 208)}
    raw = blocks.astype(np.uint8)
    start = 16 if qtype == Q.Q4_K else 48
    nibbles = blocks[..., start : start + 128].reshape(*blocks.shape[:2], 4, 32)
    u = np.concatenate([nibbles & 15, nibbles >> 4], axis=-1).reshape(*blocks.shape[:2], 256)
    if qtype == Q.Q5_K:  # bit s of qh byte l: the fifth bit of value 32 s + l
        qh = blocks[..., 16:48]
        u = u + (((qh[..., None, :] >> np.arange(8)[:, None]) & 1) << 4).reshape(u.shape)
    sc, mn = _scales_and_mins(blocks)
    return {"u": u, "sc": sc, "mn": mn, "d": _fp16(raw, 0), "dmin": _fp16(raw, 2)}


def _decode_crumbs(blocks: np.ndarray, qtype: Q) -> dict[str, np.ndarray]:
    """Q2_K / Q3_K fields: per 128 values 32 bytes of 2-bit values, value 32 j + l at bits
    2 j of byte l; Q3_K's third bits as Q5_K's fifth; Q3_K's 6-bit scales biased by 32
    (low nibbles of scales i and i + 8 in byte i, top bits of scale 4 m + k at bits 2 m of
    byte 8 + k); Q2_K's scale (low) and min (high nibble) of each 16 in bytes 0-15."""
    raw = blocks.astype(np.uint8)
    start = 16 if qtype == Q.Q2_K else 32
    groups = blocks[..., start : start + 64].reshape(*blocks.shape[:2], 2, 1, 32)
    u = ((groups >> (2 * np.arange(4))[:, None]) & 3).reshape(*blocks.shape[:2], 256)
    if qtype == Q.Q2_K:
        scales = blocks[..., 0:16]
        return {
            "u": u,
            "sc": scales & 15,
            "mn": scales >> 4,
            "d": _fp16(raw, 80),
            "dmin": _fp16(raw, 82),
        }
    hmask = blocks[..., 0:32]
    u = u + (((hmask[..., None, :] >> np.arange(8)[:, None]) & 1) << 2).reshape(u.shape)
    low, top = blocks[..., 96:104], blocks[..., 104:108]
    nibbles = np.concatenate([low & 15, low >> 4], axis=-1)
    tops = np.concatenate([(top >> (2 * m)) & 3 for m in range(4)], axis=-1)
    return {"u": u, "sc": (nibbles | (tops << 4)) - 32, "d": _fp16(raw, 108)}


def _weights(qtype: Q) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Random `qtype` rows (bytes), and their fields, checked against gguf's dequantization."""
    data, _ = BUILDERS[qtype](np.random.default_rng(1), FEATURES, COLUMNS)
    fields = _decode(data, qtype)
    sub = SUB_BLOCK[qtype]
    scale = fields["d"][..., None] * fields["sc"].astype(np.float32)  # ggml: d * sc first
    values = np.repeat(scale, sub, axis=-1) * (fields["u"] - OFFSET.get(qtype, 0))
    if qtype not in OFFSET:
        values = values - np.repeat(fields["dmin"][..., None] * fields["mn"], sub, axis=-1)
    dequantized = gguf.quants.dequantize(data, qtype).reshape(FEATURES, -1, 256)
    np.testing.assert_array_equal(values.astype(np.float32), dequantized)
    return data, fields


def reference_product(
    fields: dict[str, np.ndarray], qtype: Q, xq: np.ndarray, xd: np.ndarray, bsums: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """ggml_vec_dot_qX_K_q8_K of every (row, feature), in float64 over the exact integer
    sums: (products [rows, features], the sum of every term's magnitude, for bounds)."""
    sub = SUB_BLOCK[qtype]
    w = fields["u"] - OFFSET.get(qtype, 0)  # [features, supers, 256]
    x = xq.reshape(ROWS, -1, 256).astype(np.int64)
    products = w.reshape(1, FEATURES, -1, 256 // sub, sub) * x.reshape(ROWS, 1, -1, 256 // sub, sub)
    sums = (products.sum(axis=-1) * fields["sc"][None]).sum(axis=-1)  # exact integers
    magnitudes = (np.abs(products).sum(axis=-1) * np.abs(fields["sc"][None])).sum(axis=-1)
    scale = (fields["d"][None] * xd[:, None]).astype(np.float32).astype(np.float64)
    result, size = scale * sums, np.abs(scale) * magnitudes
    if qtype not in OFFSET:
        mins = np.repeat(fields["mn"], sub // 16, axis=-1)[None]  # per 16 values
        sums16 = bsums.reshape(ROWS, 1, -1, 16).astype(np.int64)
        min_scale = (fields["dmin"][None] * xd[:, None]).astype(np.float32).astype(np.float64)
        result = result - min_scale * (mins * sums16).sum(axis=-1)
        size = size + np.abs(min_scale) * (mins * np.abs(sums16)).sum(axis=-1)
    return result.sum(axis=-1), size.sum(axis=-1)


def _activations() -> np.ndarray:
    x = np.random.default_rng(2).standard_normal((ROWS, COLUMNS), dtype=np.float32)
    x[1, 256:512] = 0  # a super-block of zeros: d 0, values 0
    x[2, 300] = 40.0  # an outlier: most of its super-block rounds to small values
    # v = -127 gives iscale 1: halves round to even (roundf would take them away from 0).
    x[0, 0:8] = [-127, 2.5, -2.5, 0.5, -0.5, 3.5, 126.5, 1.5]
    # Equal magnitudes: the first decides the sign of the scale.
    x[2, 512:768] = 0
    x[2, 512:514] = [5, -5]
    return x


def test_activations_are_quantized_as_llama_cpp_q8_k_does() -> None:
    x = _activations()
    arrays = [
        x,
        np.zeros(x.shape, np.int8),
        np.zeros((ROWS, COLUMNS // 256), np.float32),
        np.zeros((ROWS, COLUMNS // 16), np.int16),
    ]
    target = resolve_target("llvm").make_target()
    (_, got_q, got_d, got_bsums), _ = _run(quantize_activations_q8_k(ROWS, COLUMNS), target, arrays)
    want_q, want_d, want_bsums = quantize_q8_k_reference(x)
    assert list(want_q[0, 0:8]) == [-127, 2, -2, 0, 0, 4, 126, 2]
    assert list(want_q[2, 512:514]) == [-127, 127] and want_d[2, 2] < 0
    assert (want_q[1, 256:512] == 0).all() and want_d[1, 1] == 0
    np.testing.assert_array_equal(got_q, want_q[:, STORED_ORDER])
    np.testing.assert_array_equal(got_d, want_d)
    np.testing.assert_array_equal(got_bsums, want_bsums)


@pytest.mark.parametrize("isa", _isas_here())
@pytest.mark.parametrize("qtype", list(BUILDERS), ids=lambda t: t.name)
def test_product_equals_llama_cpp_quantize_then_dot(qtype: Q, isa: str) -> None:
    x = _activations()
    xq, xd, bsums = quantize_q8_k_reference(x)
    data, fields = _weights(qtype)
    expected, size = reference_product(fields, qtype, xq, xd, bsums)
    fmt = FORMATS[qtype.name.lower()]
    planes = repack(RawTensor(data.reshape(FEATURES, -1), qtype, (FEATURES, COLUMNS)), fmt)
    out = np.zeros((ROWS, FEATURES), np.float32)
    func = int8_kquant_gemv(fmt.name, ROWS, FEATURES, COLUMNS, isa)
    weights = [planes[plane.name] for plane in fmt.planes]
    arrays = [xq[:, STORED_ORDER], xd, bsums, *weights, out]
    (*_, got), assembly = _run(func, _target_for(isa), arrays)
    assert ("vpdpbusd" if isa == VNNI else "vpmaddubsw") in assembly
    # Exact integer sums, scaled and summed in fp32: within a few ulps of the terms' size.
    assert (np.abs(got - expected) <= 1e-6 * size).all()
    # Against the float path: each activation is off by at most |d_x| (1/2 + 2**-16) (its
    # rounding to an int8 step, iscale and d rounded to fp32), times |w|.
    w = gguf.quants.dequantize(data, qtype).reshape(FEATURES, COLUMNS).astype(np.float64)
    step = np.repeat(np.abs(xd).astype(np.float64), 256, axis=1) * (0.5 + 2.0**-16)
    bound = step @ np.abs(w).T + 2e-6 * size
    assert (np.abs(got - x.astype(np.float64) @ w.T) <= bound).all()
    # The bound is not loose enough to pass anything: the rounding moves products by more.
    assert np.abs(got - x.astype(np.float64) @ w.T).max() > 100 * (1e-6 * size).max()


def test_other_formats_are_refused_by_name() -> None:
    with pytest.raises(
        ValueError,
        match=r"no int8 K-quant dot product for 'q8_0'; supported: q4_k, q5_k, q6_k, q3_k, q2_k",
    ):
        int8_kquant_gemv("q8_0", 1, 16, 256, VNNI)
    with pytest.raises(ValueError, match=r"unknown integer dot ISA 'neon'"):
        int8_kquant_gemv("q4_k", 1, 16, 256, "neon")
