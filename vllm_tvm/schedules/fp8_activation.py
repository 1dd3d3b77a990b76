"""Per-token FP8 E4M3 quantization of activations, for GEMMs whose both operands are FP8.

Why this exists: cuBLASLt's FP8 tensor-core GEMMs take FP8 activations as well as FP8
weights. A prefill GEMM of an FP8 checkpoint therefore quantizes its input rows first: each
token row gets its own scale, amax(|row|) / 448 (448 is E4M3's largest finite value), so
the row's largest value lands on the top of the E4M3 range, and each value becomes the E4M3
code of value / scale, rounded to nearest with ties to even (the rounding of CUDA's
`__nv_cvt_float_to_fp8` with saturation and of `ml_dtypes.float8_e4m3fn`). The GEMM applies
the token scales and the weight's per-row scales to the fp32 accumulator.

The encoding is written with integer operations on the fp32 bit pattern instead of a cast to
a float8 dtype, so it compiles and is tested on every target: for normal values the 23-bit
mantissa is rounded to 3 bits with the usual add-half-minus-one-plus-lowest-kept-bit trick
(a carry moves into the exponent, as it must) and the exponent is rebased from 127 to 7;
values under E4M3's smallest normal 2**-6 are subnormal codes round(|v| * 2**9).
"""

from __future__ import annotations

from tvm import te, tirx

E4M3_MAX = 448.0
"""Largest finite FP8 E4M3 (fn) value."""

_SMALLEST_NORMAL = 2.0**-6
_SUBNORMAL_STEPS = 2.0**9
"""Subnormal E4M3 values are multiples of 2**-9."""
_EXPONENT_REBASE = (127 - 7) << 3
"""Difference of the fp32 and E4M3 exponent biases, at the exponent's place in a code."""
_MIN_SCALE = 1e-12
"""Scale of an all-zero row (any positive value encodes it as zeros)."""


def _u32(value: int) -> tirx.Expr:
    return tirx.const(value, "uint32")


def encode_e4m3(value: tirx.Expr) -> tirx.Expr:
    """The E4M3 code (uint8) of fp32 `value`, saturated to +-448, ties to even."""
    magnitude = tirx.min(tirx.abs(value), tirx.const(E4M3_MAX, "float32"))
    bits = tirx.reinterpret("uint32", magnitude)
    rounded = (bits + _u32(0x7FFFF) + ((bits >> _u32(20)) & _u32(1))) >> _u32(20)
    normal = rounded - _u32(_EXPONENT_REBASE)
    subnormal = tirx.nearbyint(magnitude * tirx.const(_SUBNORMAL_STEPS, "float32")).astype("uint32")
    code = tirx.Select(magnitude < tirx.const(_SMALLEST_NORMAL, "float32"), subnormal, normal)
    sign = (tirx.reinterpret("uint32", value) >> _u32(31)) << _u32(7)
    return (code | sign).astype("uint8")


def token_scales(x: te.Tensor) -> te.Tensor:
    """float32 [rows]: amax(|row|) / 448 of each row of x [rows, k] (never zero)."""
    rows, k = x.shape
    column = te.reduce_axis((0, k), name="column")
    amax = te.compute(
        (rows,),
        lambda r: te.max(tirx.abs(x[r, column].astype("float32")), axis=column),
        name="token_amax",
    )
    return te.compute(
        (rows,),
        lambda r: tirx.max(amax[r] / tirx.const(E4M3_MAX, "float32"), _MIN_SCALE),
        name="token_scale",
    )


def quantize_tokens(x: te.Tensor, scales: te.Tensor) -> te.Tensor:
    """uint8 [rows, k]: the E4M3 codes of x [rows, k] divided by its row's scale."""
    return te.compute(
        x.shape,
        lambda r, c: encode_e4m3(x[r, c].astype("float32") / scales[r]),
        name="token_fp8",
    )


def weight_row_scales(scales: te.Tensor) -> te.Tensor:
    """float32 [rows]: column 0 of a weight's scale plane [rows, groups], for weights whose
    scale is one per row (per-tensor and per-channel schemes)."""
    return te.compute((scales.shape[0],), lambda r: scales[r, 0], name="weight_row_scale")
