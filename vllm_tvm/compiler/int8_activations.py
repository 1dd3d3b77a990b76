"""Route a CPU build's Q8_0 / Q4_x / Q5_x / K-quant matmuls to int8 activations and integer dots.

Why: the fused matmuls of model_defs/quant_linear.py widen each weight to fp32 in registers
and multiply fp32 activations, one float FMA per weight. With `--cpu-int8-activations on`
(artifacts/compile_options.py) each `call_tir` of a Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1
`nt_matmul` becomes, as in llama.cpp, a quantization of its activations per block of 32
(Q8_0: fp16 scale, int8 values; for Q4_1 / Q5_1, whose blocks have a min, Q8_1: also
s = d * sum(q)) and the integer dot product of those with the weight's blocks, one
instruction for 32 byte products (schedules/cpu_int8_dot.py; VNNI or AVX2, from the
target's features; over several token rows the register-blocked schedules/cpu_int8_gemm.py).
Q4_K / Q5_K / Q6_K (and Q2_K / Q3_K) products take llama.cpp's Q8_K activations instead (per
256 values an fp32 scale, int8 values and the sums of each 16;
schedules/cpu_int8_kquant_dot.py, x86 only). The numerics change as llama.cpp's do: each
activation is rounded to its block's int8 step, so logits differ from the float path's
(tests/test_cpu_int8_activations.py states the bound);
products over other weight formats, and every float matmul, stay on the float path.

The rewrite runs in the first phase of the pipeline (pipeline.py), while the matmuls are
still recognisable `call_tir`s; the kernels it adds are scheduled already, and opaque to
operator fusion.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.sym.analyzer import Analyzer

from vllm_tvm.artifacts.compile_options import INT8_AUTO, INT8_OFF, INT8_ON
from vllm_tvm.checkpoints.weight_formats import quant_format
from vllm_tvm.compiler.relax_rewrite import rewrite_functions
from vllm_tvm.compiler.targets import TargetSpec
from vllm_tvm.schedules.cpu_int8_dot import (
    BLOCK,
    INT8_DOT_FORMATS,
    OFFSET_FORMATS,
    Rows,
    int8_dot_isa,
    quantize_activations,
)
from vllm_tvm.schedules.cpu_int8_gemm import int8_product, uses_gemm
from vllm_tvm.schedules.cpu_int8_kquant_dot import (
    INT8_KQUANT_FORMATS,
    INT8_KQUANT_ISAS,
    SUPER_BLOCK,
    int8_kquant_gemv,
    quantize_activations_q8_k,
)

ACTIVATION_DTYPE = "float32"
"""The activations (and outputs) the integer path takes: a CPU build's GGUF dtype."""

INTEGER_FORMATS = (*INT8_DOT_FORMATS, *INT8_KQUANT_FORMATS)
"""Weight formats whose products the integer path takes: Q8_0 / Q8_1 activations for the
32-value formats, Q8_K for the K-quants."""

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
_QUANT_MATMUL = re.compile(rf"nt_matmul_({'|'.join(INTEGER_FORMATS)})\d*")
"""quant_linear.py names each product `nt_matmul_<format>` (numbered when repeated)."""


def resolve_int8_activations(
    choice: str, spec: TargetSpec, dtype: str, weight_formats: Mapping[str, str]
) -> str:
    """`on` or `off` for the `--cpu-int8-activations` `choice`: `auto` is `on` where it
    applies (a CPU target with integer dot products, dtype float32, some weights kept
    quantized in INTEGER_FORMATS); `on` where it does not is refused, saying which
    condition fails."""
    if choice == INT8_OFF:
        return INT8_OFF
    reason = _why_not(spec, dtype, weight_formats)
    if reason is None:
        return INT8_ON
    if choice == INT8_AUTO:
        return INT8_OFF
    raise ValueError(f"cpu_int8_activations 'on' does not apply: {reason} (use 'off' or 'auto')")


def _why_not(spec: TargetSpec, dtype: str, weight_formats: Mapping[str, str]) -> str | None:
    if spec.kind != "llvm" or int8_dot_isa(spec.make_target()) is None:
        return (
            f"target '{spec.name}' has no integer dot products (AVX-512 VNNI, AVX-VNNI, AVX2,"
            " aarch64 dotprod)"
        )
    if dtype != ACTIVATION_DTYPE:
        return f"dtype '{dtype}': the integer path takes {ACTIVATION_DTYPE} activations"
    kernels = {quant_format(name).kernel for name in weight_formats.values()}
    if not kernels & set(INTEGER_FORMATS):
        kept = ", ".join(sorted(set(weight_formats.values()))) or "none"
        return (
            f"no weight is kept as one of {', '.join(INTEGER_FORMATS)} (kept quantized: "
            f"{kept}; the integer kernels multiply those formats only)"
        )
    return None


def int8_activation_isa(choice: str, spec: TargetSpec) -> str | None:
    """The integer dot instructions a resolved `choice` compiles to (None: the float path)."""
    return int8_dot_isa(spec.make_target()) if choice == INT8_ON else None


@mutator
class _Int8Rewriter(PyExprMutator):
    """Rewrites each float32 `call_tir` of an INTEGER_FORMATS product; counts them in
    `rewritten`."""

    def __init__(self, mod: tvm.IRModule, isa: str) -> None:
        super().__init__(mod)
        self.isa = isa
        self.rewritten = 0
        self._kernels: dict[tuple[object, ...], tvm.ir.GlobalVar] = {}
        self._analyzer = Analyzer()

    def _kernel(
        self, key: tuple[object, ...], name: str, make: Callable[[], tirx.PrimFunc]
    ) -> tvm.ir.GlobalVar:
        """The module's function for `key`, added (made by `make`) on first use."""
        if key not in self._kernels:
            self._kernels[key] = self.builder_.add_func(make().without_attr("global_symbol"), name)
        return self._kernels[key]

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        callee = call.args[0] if call.op == _CALL_TIR else None
        matched = isinstance(callee, tvm.ir.GlobalVar) and _QUANT_MATMUL.fullmatch(callee.name_hint)
        if not matched:
            return call
        x, *planes = call.args[1].fields
        if x.ty.dtype != ACTIVATION_DTYPE or call.ty.dtype != ACTIVATION_DTYPE:
            return call
        if matched.group(1) in INT8_KQUANT_FORMATS and self.isa not in INT8_KQUANT_ISAS:
            return call
        self.rewritten += 1
        return self._integer_product(matched.group(1), x, planes, call.ty)

    def _integer_product(
        self, fmt: str, x: relax.Expr, planes: list[relax.Expr], out: relax.TensorType
    ) -> relax.Expr:
        """x's rows quantized per block (see `_quantization`), times the weight `planes` of
        `fmt` (in the format's plane order), in x's shape."""
        *leading, columns = x.ty.shape.values
        columns, features = int(columns), int(out.shape.values[-1])
        rows = leading[0]
        for dim in leading[1:]:
            rows = rows * dim
        rows = self._analyzer.simplify(rows)
        static = int(rows) if isinstance(rows, tirx.IntImm) else None
        kernel_rows = static if static is not None else tirx.Var("rows", "int64")
        quantize, outputs = self._quantization(fmt, static, kernel_rows, rows, columns)
        kquant = fmt in INT8_KQUANT_FORMATS
        make_product = int8_kquant_gemv if kquant else int8_product
        gemm = not kquant and uses_gemm(kernel_rows, features)
        product = self._kernel(
            (fmt, static, features, columns),
            f"int8_{'gemm' if gemm else 'dot'}_{fmt}",
            lambda: make_product(fmt, kernel_rows, features, columns, self.isa),
        )
        flat = self.builder_.emit(relax.op.reshape(x, relax.ShapeExpr([rows, columns])))
        quantized = self.builder_.emit(relax.call_tir(quantize, [flat], outputs))
        activations = [relax.TupleGetItem(quantized, i) for i in range(len(outputs))]
        result = self.builder_.emit(
            relax.call_tir(
                product,
                [*activations, *planes],
                relax.TensorType([rows, features], ACTIVATION_DTYPE),
            )
        )
        return relax.op.reshape(result, out.shape)

    def _quantization(
        self, fmt: str, static: int | None, kernel_rows: Rows, rows: tirx.Expr, columns: int
    ) -> tuple[tvm.ir.GlobalVar, list[relax.TensorType]]:
        """The activation quantization `fmt`'s product takes (Q8_K for the K-quants, Q8_1
        for OFFSET_FORMATS, else Q8_0), and the types of its outputs."""
        if fmt in INT8_KQUANT_FORMATS:
            quantize = self._kernel(
                ("quantize_q8_k", static, columns),
                "quantize_activations_q8_k",
                lambda: quantize_activations_q8_k(kernel_rows, columns),
            )
            return quantize, [
                relax.TensorType([rows, columns], "int8"),
                relax.TensorType([rows, columns // SUPER_BLOCK], "float32"),
                relax.TensorType([rows, columns // 16], "int16"),
            ]
        with_sums = fmt in OFFSET_FORMATS
        quantize = self._kernel(
            ("quantize", with_sums, static, columns),
            "quantize_activations_q8_1" if with_sums else "quantize_activations_q8_0",
            lambda: quantize_activations(kernel_rows, columns, with_sums),
        )
        per_block = relax.TensorType([rows, columns // BLOCK], "float16")
        outputs = [relax.TensorType([rows, columns], "int8"), per_block]
        return quantize, outputs + ([per_block] if with_sums else [])


def int8_activations_pass(isa: str) -> tvm.transform.Pass:
    """The module pass that routes INTEGER_FORMATS products to `isa`'s integer kernels (the
    float kernels no call uses any more are dropped)."""

    def rewrite(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
        return rewrite_functions(mod, _Int8Rewriter(mod, isa))[0]

    return tvm.transform.module_pass(rewrite, opt_level=0, name="RouteInt8Activations")
