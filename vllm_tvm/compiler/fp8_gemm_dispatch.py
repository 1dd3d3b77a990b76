"""Route FP8-weight NT matmuls with a run-time row count to cuBLASLt's FP8 tensor-core GEMM.

Why: an FP8 checkpoint's weights stay FP8 on the device (model_defs/quant_linear.py), and
the TIR kernel that dequantizes them inside the product runs on CUDA cores. From sm_89 on,
cuBLASLt multiplies FP8 by FP8 on tensor cores at twice the 16-bit rate. Prefill and batched
decode products of such weights therefore become three steps:

1. the activation rows are quantized to FP8 E4M3, one scale per token
   (schedules/fp8_activation.py), the dynamic per-token scheme vLLM uses for FP8 weights;
2. `vllm_tvm.cublaslt.gemm_fp8_nt` (extensions/cublaslt_gemm.cc) multiplies the codes and
   applies the token scales and the weight's per-row scales to the fp32 accumulator
   (cuBLASLt's outer-vector scale mode), writing the float16/bfloat16 output;
3. nothing else: the output is the product's.

Only weights with one scale per row (per-tensor and per-channel checkpoints) qualify; block
scales (DeepSeek's 128 x 128) vary along k and stay on the dequantizing TIR kernel, as do
static single-row products (`decode_single`, read at copy bandwidth by the TIR GEMV and
captured in CUDA graphs) and shapes cuBLASLt's FP8 path rejects (k or n not a multiple of
16). The activation quantization changes numerics (about 2**-4 relative per value before
accumulation); `--gemm tir` keeps the exact dequantizing path.
"""

from __future__ import annotations

import re
from functools import reduce

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from vllm_tvm.compiler.relax_rewrite import rewrite_functions
from vllm_tvm.schedules.fp8_activation import quantize_tokens, token_scales, weight_row_scales

FP8_GEMM_FUNCTION = "vllm_tvm.cublaslt.gemm_fp8_nt"
FP8_GEMM_MIN_ARCH = 89
"""First CUDA architecture with FP8 tensor cores (Ada)."""
_FP8_MATMUL_NAME = re.compile(r"nt_matmul_fp8_e4m3\d*")
_ACTIVATION_DTYPES = ("float16", "bfloat16")
_ALIGNMENT = 16
"""cuBLASLt's FP8 GEMM wants k and n in multiples of 16 elements."""
_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def fp8_gemm_applies(arch: str | None) -> bool:
    """Whether CUDA architecture `arch` (e.g. "sm_90a") has FP8 tensor cores."""
    number = re.fullmatch(r"sm_(\d+)a?", arch or "")
    return number is not None and int(number.group(1)) >= FP8_GEMM_MIN_ARCH


def _static(dim: tirx.PrimExpr) -> int | None:
    return int(dim) if isinstance(dim, tirx.IntImm) else None


@mutator
class _Fp8GemmRewriter(PyExprMutator):
    """Rewrites matching FP8 `call_tir`s into quantize + cuBLASLt; counts them."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.rewritten = 0

    def _operands(self, call: relax.Call) -> tuple[relax.Expr, relax.Expr, relax.Expr] | None:
        callee = call.args[0]
        if not isinstance(callee, tvm.ir.GlobalVar):
            return None
        if not _FP8_MATMUL_NAME.fullmatch(callee.name_hint):
            return None
        inputs = call.args[1].fields
        if len(inputs) != 3 or not isinstance(call.ty, relax.TensorType):
            return None
        x, codes, scales = inputs
        x_dims = list(x.ty.shape.values)
        if x.ty.dtype not in _ACTIVATION_DTYPES or call.ty.dtype != x.ty.dtype:
            return None
        rows = [_static(dim) for dim in x_dims[:-1]]
        if all(r is not None for r in rows) and reduce(lambda a, b: a * b, rows, 1) == 1:
            return None  # a static single row: the TIR GEMV's job
        k, n = _static(x_dims[-1]), _static(codes.ty.shape.values[0])
        if k is None or n is None or k % _ALIGNMENT or n % _ALIGNMENT:
            return None
        return x, codes, scales

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        operands = self._operands(call) if call.op == _CALL_TIR else None
        if operands is None:
            return call
        x, codes, scales = operands
        x_dims = list(x.ty.shape.values)
        k, n = x_dims[-1], codes.ty.shape.values[0]
        rows = reduce(lambda a, b: a * b, x_dims[:-1], tirx.IntImm("int64", 1))
        flat = self.builder_.emit(relax.op.reshape(x, relax.ShapeExpr([rows, k])))
        token_scale = self.builder_.emit_te(token_scales, flat, primfunc_name_hint="fp8_scales")
        token_codes = self.builder_.emit_te(
            quantize_tokens, flat, token_scale, primfunc_name_hint="fp8_quantize"
        )
        row_scale = self.builder_.emit_te(
            weight_row_scales, scales, primfunc_name_hint="fp8_weight_scales"
        )
        product = self.builder_.emit(
            relax.op.call_dps_packed(
                FP8_GEMM_FUNCTION,
                [token_codes, codes, token_scale, row_scale],
                relax.TensorType([rows, n], call.ty.dtype),
            )
        )
        self.rewritten += 1
        return relax.op.reshape(product, relax.ShapeExpr([*x_dims[:-1], n]))


def dispatch_fp8_gemms(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """`mod` with qualifying FP8 NT matmuls calling cuBLASLt's FP8 GEMM, and their count."""
    return rewrite_functions(mod, _Fp8GemmRewriter(mod))


@tvm.transform.module_pass(opt_level=0, name="DispatchFp8GemmsToCublaslt")
def dispatch_fp8_gemms_pass(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """`dispatch_fp8_gemms` as a module pass."""
    rewritten_mod, _ = dispatch_fp8_gemms(mod)
    return rewritten_mod
