"""Per-target schedule rules applied to every fused TIR function after legalization.

GPU targets use the expert products' own rule (gpu_expert.py), then dlight's rule list
(GEMV for decode, Matmul for prefill, reductions for norms/softmax, with wide RMSNorm rows
read once in vectors: gpu_norm.py), vector-width elementwise kernels (gpu_elementwise.py)
and a fallback for the rest. CPU targets schedule the NT matmuls (see cpu_matmul.py;
5x faster decode measured on a 0.5B model; cpu_quant_matmul.py for those over quantized weights)
and vectorisable elementwise kernels (cpu_elementwise.py: SwiGLU's silu * mul); everything
else keeps LLVM's default lowering. dlight's own CPU GEMV rule vectorises
across output rows, which on the NT layout made LLVM spend minutes on
one function and ran slower than unscheduled code.
"""

from __future__ import annotations

import tvm
from tvm.s_tir import dlight as dl

from vllm_tvm.schedules.cpu_elementwise import CPUElementwise
from vllm_tvm.schedules.cpu_matmul import CPUNTMatmul
from vllm_tvm.schedules.cpu_quant_matmul import CPUQuantNTMatmul
from vllm_tvm.schedules.gpu_decode import DecodeLowBatchGEMV
from vllm_tvm.schedules.gpu_elementwise import VectorizedElementwise
from vllm_tvm.schedules.gpu_expert import ExpertMatmul
from vllm_tvm.schedules.gpu_norm import WideRowRMSNorm


def schedule_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """The scheduling passes for `target`."""
    if target.kind.name == "llvm":
        # The quantized rule first: the plain one would also match its reduction.
        return [dl.ApplyDefaultSchedule(CPUQuantNTMatmul(), CPUNTMatmul(), CPUElementwise())]
    return [
        dl.ApplyDefaultSchedule(
            # Expert products read weights through the routing tensor (see gpu_expert.py).
            ExpertMatmul(),
            # Decode's [batch_size, 1, k] x [n, k]^T goes to LowBatchGEMV (see gpu_decode.py).
            DecodeLowBatchGEMV(),
            dl.gpu.Matmul(),
            dl.gpu.GEMV(),
            # Rows of 4,096k 16-bit elements: one vector load a thread (gpu_norm.py).
            WideRowRMSNorm(),
            dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(),
            # Elementwise kernels as 16-byte vector accesses where provably safe
            # (gpu_elementwise.py); the fallback gives one element per thread.
            VectorizedElementwise(),
            dl.gpu.Fallback(),
        )
    ]
