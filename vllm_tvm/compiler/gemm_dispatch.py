"""Route the models' float NT matmuls with a run-time row count to cuBLASLt.

Why: TVM 0.27's stock GPU matmul schedules use no tensor cores on Hopper, so prefill and
batched decode ran at a few percent of the GPU's matrix throughput. This pass replaces each
`call_tir` of an `nt_matmul` (layers.py: y = x @ w^T, fp32 accumulation, float16/bfloat16
inputs) whose rows are not a static 1 by `call_dps_packed` of the extension in
`extensions/cublaslt_gemm.cc`. Static single-row products (`decode_single`) stay on the TIR
GEMV schedule, which reads weights at copy bandwidth and is captured in CUDA graphs.
`--gemm tir` keeps every matmul on TIR (the plain arm for A/B runs). The pass runs in the
first phase of the pipeline (pipeline.py), before legalization, while the matmuls are still
recognisable `call_tir`s; `calls_cublaslt` tells the compiler whether the artifact must carry
the extension.
"""

from __future__ import annotations

import re

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, PyExprVisitor, mutator, visitor

from vllm_tvm.compiler.fp8_gemm_dispatch import FP8_GEMM_FUNCTION
from vllm_tvm.compiler.relax_rewrite import rewrite_functions

CUBLASLT_GEMM_FUNCTION = "vllm_tvm.cublaslt.gemm_nt"
_EXTENSION_FUNCTIONS = (CUBLASLT_GEMM_FUNCTION, FP8_GEMM_FUNCTION)
"""Everything the extension registers that a library may call (fp8_gemm_dispatch.py: FP8)."""
_NT_MATMUL_NAME = re.compile(r"nt_matmul\d*")
_INPUT_DTYPES = ("float16", "bfloat16")
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_CALL_DPS_PACKED = tvm.ir.Op.get("relax.call_dps_packed")


def _is_static_single_row(sinfo: relax.TensorType) -> bool:
    rows = 1
    for dim in list(sinfo.shape.values)[:-1]:
        if not isinstance(dim, tirx.IntImm):
            return False
        rows *= int(dim)
    return rows == 1


@mutator
class _GemmRewriter(PyExprMutator):
    """Rewrites matching `call_tir`s; counts them in `rewritten`."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.mod = mod
        self.rewritten = 0

    def _matches(self, call: relax.Call) -> bool:
        callee = call.args[0]
        if not isinstance(callee, tvm.ir.GlobalVar):
            return False
        if not _NT_MATMUL_NAME.fullmatch(callee.name_hint):
            return False
        inputs = call.args[1].fields
        if len(inputs) != 2:
            return False
        x_sinfo, w_sinfo = (arg.ty for arg in inputs)
        out_sinfo = call.ty
        if not isinstance(out_sinfo, relax.TensorType):
            return False
        if x_sinfo.dtype not in _INPUT_DTYPES or w_sinfo.dtype != x_sinfo.dtype:
            return False
        if out_sinfo.dtype not in (x_sinfo.dtype, "float32"):
            return False
        return not _is_static_single_row(x_sinfo)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if call.op != _CALL_TIR or not self._matches(call):
            return call
        self.rewritten += 1
        return relax.op.call_dps_packed(CUBLASLT_GEMM_FUNCTION, call.args[1], call.ty)


def dispatch_gemms_to_cublaslt(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """`mod` with matching NT matmuls calling cuBLASLt, and how many calls were rewritten.

    The TIR functions no rewritten call uses any more are dropped, so they are not compiled.
    """
    return rewrite_functions(mod, _GemmRewriter(mod))


@tvm.transform.module_pass(opt_level=0, name="DispatchGemmsToCublaslt")
def dispatch_gemms_pass(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """`dispatch_gemms_to_cublaslt` as a module pass (the count is `calls_cublaslt`'s to tell)."""
    rewritten_mod, _ = dispatch_gemms_to_cublaslt(mod)
    return rewritten_mod


@visitor
class _CublasltCallFinder(PyExprVisitor):
    """Sets `found` on reaching a `call_dps_packed` of one of the extension's GEMMs."""

    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_call_(self, call: relax.Call) -> None:
        super().visit_call_(call)
        callee = call.args[0] if call.op == _CALL_DPS_PACKED else None
        if isinstance(callee, relax.ExternFunc) and callee.global_symbol in _EXTENSION_FUNCTIONS:
            self.found = True


def calls_cublaslt(mod: tvm.IRModule) -> bool:
    """Whether any Relax function of `mod` calls a GEMM of the cuBLASLt extension."""
    finder = _CublasltCallFinder()
    for _, function in mod.functions_items():
        if isinstance(function, relax.Function):
            finder.visit_expr(function)
    return finder.found
