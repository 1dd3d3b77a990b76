"""Per-target schedule rules applied to every fused TIR function after legalization.

GPU targets use dlight's rule list (GEMV for decode, Matmul for prefill, reductions for
norms/softmax, a fallback for the rest). CPU targets keep LLVM's default lowering for now:
dlight's CPU GEMV rule on the NT layout made LLVM spend minutes on one function and ran
slower than unscheduled code, so it stays off until a measured CPU schedule replaces it.
"""

from __future__ import annotations

import tvm
from tvm.s_tir import dlight as dl


def schedule_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """The scheduling passes for `target` (empty on CPU)."""
    if target.kind.name == "llvm":
        return []
    return [
        dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(),
            dl.gpu.GEMV(),
            dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(),
            dl.gpu.Fallback(),
        )
    ]
