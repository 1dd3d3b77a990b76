"""exp2, exp and tanh as plain TIR arithmetic, so a `T.vectorized` loop using them stays vector.

Why: TIR's `T.exp2` / `T.exp` become LLVM's `llvm.exp2` / `llvm.exp` intrinsics, which have
no vector implementation on x86 without a vector math library: LLVM splits a vector call
into one `exp2f` library call per lane. A softmax over a block of attention scores then
spends most of its time in those calls. Here exp2 is written out as the textbook range
reduction (x = n + f with n an integer and |f| <= 1/2), a polynomial for 2^f and the
exponent bits of 2^n built by integer arithmetic: floor, casts, shifts and fused
multiply-adds that every vector unit has.

Accuracy (fp32 evaluation against float64, `test_vector_exp2_and_tanh_against_float64` in
tests/test_cpu_attention_reference.py): relative error below 2.5e-7 (about two fp32
rounding steps) wherever the result is a normal number. Inputs are clamped to [-127, 127];
from -126.5 down the result is exactly 0, which is what a softmax wants of a masked score.
"""

from __future__ import annotations

import math

import tvm
from tvm.script import tirx as T

EXP2_COEFFICIENTS = (
    0.9999999999595471,
    0.6931472067106261,
    0.24022651213598623,
    0.05550327214205272,
    0.009618025602847956,
    0.0013400432165807399,
    0.0001546973199196682,
)
"""2^f on [-1/2, 1/2], lowest power first: the degree-6 Chebyshev interpolant (its own error
2.6e-9 relative, far below fp32 rounding)."""

_EXPONENT_BIAS = 127
_MANTISSA_BITS = 23
_LOG2E = math.log2(math.e)
_LN2 = math.log(2)
_LN2_HIGH = 0.693359375
"""ln 2 to 9 bits (355 / 512): times any whole part up to 127 it is exact in fp32."""
_LN2_LOW = _LN2 - _LN2_HIGH


def _power_of_two(whole: tvm.tirx.PrimExpr, fraction: tvm.tirx.PrimExpr) -> tvm.tirx.PrimExpr:
    """2**(whole + fraction) for an integral fp32 `whole` in [-127, 127] and |fraction| <= 1/2."""
    power = T.float32(EXP2_COEFFICIENTS[-1])
    for coefficient in reversed(EXP2_COEFFICIENTS[:-1]):
        power = power * fraction + T.float32(coefficient)
    exponent = T.shift_left(T.Cast("int32", whole) + _EXPONENT_BIAS, _MANTISSA_BITS)
    return power * T.reinterpret("float32", exponent)


def exp2(x: tvm.tirx.PrimExpr) -> tvm.tirx.PrimExpr:
    """2**x for an fp32 expression `x`, without a library call."""
    clamped = T.max(T.min(x, T.float32(_EXPONENT_BIAS)), T.float32(-_EXPONENT_BIAS))
    whole = T.floor(clamped + T.float32(0.5))
    return _power_of_two(whole, clamped - whole)


def exp(x: tvm.tirx.PrimExpr) -> tvm.tirx.PrimExpr:
    """e**x for an fp32 expression `x`, without a library call.

    Not exp2(x * log2 e): rounding that product costs up to half an ulp of a number as large
    as 127, about 7e-7 relative in the result near |x| = 88. Instead the whole part n is
    taken off in natural units with ln 2 split in two (Cody-Waite: n * LN2_HIGH is exact),
    so the reduced argument keeps fp32 precision. Inputs are clamped to +-127 ln 2."""
    limit = _EXPONENT_BIAS * _LN2
    clamped = T.max(T.min(x, T.float32(limit)), T.float32(-limit))
    whole = T.floor(clamped * T.float32(_LOG2E) + T.float32(0.5))
    reduced = clamped - whole * T.float32(_LN2_HIGH) - whole * T.float32(_LN2_LOW)
    return _power_of_two(whole, reduced * T.float32(_LOG2E))


def tanh(x: tvm.tirx.PrimExpr) -> tvm.tirx.PrimExpr:
    """tanh(x) for an fp32 expression `x` through `exp2` of a non-positive argument (no
    overflow): tanh(|x|) = (1 - t) / (1 + t) with t = e^(-2|x|), its sign restored."""
    t = exp2(T.float32(-2 * _LOG2E) * T.fabs(x))
    magnitude = (T.float32(1) - t) / (T.float32(1) + t)
    return T.Select(x < T.float32(0), -magnitude, magnitude)
