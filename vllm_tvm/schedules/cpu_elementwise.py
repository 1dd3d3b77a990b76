"""CPU schedule for injective kernels (SwiGLU's silu(gate) * up first): one parallel,
vectorised loop with a polynomial sigmoid.

Why: CPU targets had no schedule for elementwise kernels, so LLVM lowered them as TIR left
them after fusion: one serial loop per fused op, each writing a full intermediate buffer
(split, sigmoid, two multiplies: five passes over 512 x 4864 floats for a 0.5B model's
prefill), on one core, with TIR's `sigmoid` calling the scalar `expf` once per element
(LLVM has no vector `exp` on x86 without a vector math library). That kernel took 9 % of a
512-token prefill (benchmarks/results/cpu_prefill_profile_2026-12-04/).

Here every producer is inlined into the one output block, the innermost axis is split into
vectors of `VECTOR_BYTES` and vectorised, the remaining loops are fused and run by the
thread pool, and fp32 `sigmoid(x)` becomes 1 / (1 + e^-x) with vector_math.py's exp. The
rule takes only kernels elementwise_lanes.py proves vectorisable; others keep LLVM's
default lowering. Accuracy of the sigmoid: test_cpu_elementwise.py (float64 oracle).
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.target import Target

from vllm_tvm.schedules import vector_math
from vllm_tvm.schedules.elementwise_lanes import vectorisable_loops

VECTOR_BYTES = 64
"""One AVX-512 register; LLVM splits the vector for narrower units (AVX2, NEON)."""

_SIGMOID = ir.Op.get("tirx.sigmoid")


def sigmoid(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """1 / (1 + e^-x) for an fp32 expression `x` through vector_math.exp (no library call).

    Below x = -88 the exponential is clamped at 2^127, so the result is 2^-127 instead of a
    smaller denormal; from x = 88 on it is exactly 1."""
    one = tirx.const(1.0, "float32")
    return one / (one + vector_math.exp(-x))


def polynomial_sigmoids(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with every fp32 `sigmoid` call written out as `sigmoid` above."""

    def rewrite(call: ir.Call) -> ir.Expr:
        if call.op.same_as(_SIGMOID) and str(call.ty) == "float32":
            return sigmoid(call.args[0])
        return call

    return tvm_ffi.structural_map(func, (ir.Call, rewrite))


class CPUElementwise(dl.ScheduleRule):
    """Injective llvm kernels as one parallel loop over vectors; declines what it cannot
    prove vectorisable."""

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool) -> s_tir.Schedule | None:
        if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
            return None
        sch = s_tir.Schedule(polynomial_sigmoids(func))
        found = vectorisable_loops(sch, VECTOR_BYTES)
        if found is None:
            return None
        loops, lanes = found
        # The lanes split off the innermost loop alone, so a lane moves only the innermost
        # index (see gpu_elementwise.py); the pool divides the fused rest among its threads.
        *outer_loops, innermost = loops
        row_part, lane = sch.split(innermost, factors=[None, lanes])
        sch.parallel(sch.fuse(*outer_loops, row_part))
        sch.vectorize(lane)
        return sch
