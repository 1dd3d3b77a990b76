"""Per-target schedule rules applied to every fused TIR function after legalization.

GPU targets use dlight's rule list (GEMV for decode, Matmul for prefill, reductions for
norms/softmax, a fallback for the rest). CPU targets schedule only the NT matmuls (see
cpu_matmul.py; 5x faster decode measured on a 0.5B model); everything else keeps LLVM's
default lowering. dlight's own CPU GEMV rule vectorises across output rows, which on the
NT layout made LLVM spend minutes on one function and ran slower than unscheduled code.
"""

from __future__ import annotations

import tvm
from tvm.s_tir import dlight as dl

from vllm_tvm.schedules.cpu_matmul import CPUNTMatmul


def schedule_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """The scheduling passes for `target`."""
    if target.kind.name == "llvm":
        return [dl.ApplyDefaultSchedule(CPUNTMatmul())]
    return [
        dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(),
            dl.gpu.GEMV(),
            dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(),
            dl.gpu.Fallback(),
        )
    ]
