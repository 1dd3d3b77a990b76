"""Integer dot products on CPUs: activations quantized to int8 per block, as llama.cpp does.

Why this exists: the fused matmuls of model_defs/quant_linear.py widen every weight to fp32
in registers and multiply fp32 activations, so a Q8_0 or Q4_0 product costs a float FMA per
weight. llama.cpp instead quantizes the activations per block of 32 (its Q8_0: an fp16 scale
d = max|x| / 127 and int8 values round(x / d)) and multiplies int8 by int8 with the CPU's
integer dot products, 32 products per instruction or two, then scales each block's integer
sum once. This module holds the pieces of that path:

- `int8_dot_isa`: which instructions a target has. VNNI (`vpdpbusd`, from AVX-512 VNNI with
  AVX-512 VL, or AVX-VNNI) sums four u8 x s8 products into each int32 lane; AVX2 takes two
  steps (`vpmaddubsw` to int16 pairs, `vpmaddwd` by ones to int32). Both multiply unsigned by
  signed bytes, so a block is multiplied as |w| times x with w's sign moved onto x
  (`vpsignb`), llama.cpp's `mul_sum_i8_pairs`. On aarch64 with dotprod, `sdot` multiplies
  signed by signed bytes, four products to each int32 lane. None: the float path.
- `quantize_activations`: llama.cpp's reference `quantize_row_q8_0` (scale 1 / d, rounding
  half away from zero, d stored as fp16), vectorised over a block; or its `quantize_row_q8_1`,
  which adds s = d * sum(q) per block (fp16) for the weight formats with a min.
- `int8_gemv`: the product of those activations with Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 planes
  (checkpoints/weight_formats.py), per block: the integer sum, times the fp16 weight scale
  times the fp16 activation scale, accumulated in eight fp32 lanes as llama.cpp's AVX2
  `ggml_vec_dot_q8_0_q8_0` does; one horizontal sum per output. Q5_0 / Q5_1 add each
  value's fifth bit (times 16); Q4_1's / Q5_1's values are unsigned (0..15 / 0..31: bytes
  multiplied as they are, no sign move) and their min m adds m * s per block, summed apart.

The instructions are called through `T.call_llvm_pure_intrin` (the LLVM 22 signatures take
byte vectors); `sch.tensorize` crashes in this TVM build. The results differ from the float
path by the activations' quantization error (at most about d / 2 per value). The compiler
routes a model's products here with `--cpu-int8-activations` (compiler/int8_activations.py);
both kernels take a run-time row count (a TIR variable) or a fixed one, and come scheduled:
rows (quantization) or output features (products) split over the parallel tasks.
"""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as T
from tvm.target import Target, codegen

BLOCK = 32
"""Values per quantization block of activations and weights (llama.cpp's QK8_0)."""

VNNI = "vnni"
AVX2 = "avx2"
SDOT = "sdot"
"""aarch64's signed dot product (`sdot`, the dotprod extension): four s8 x s8 products
summed into each int32 lane of a 128-bit register, so no sign move."""
ISAS = (VNNI, AVX2, SDOT)
INT8_DOT_FORMATS = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
"""Weight formats `int8_gemv` multiplies."""
_SIGNED_OFFSET = {"q4_0": 8, "q5_0": 16}
"""What the formats without a min subtract from their unsigned 4- or 5-bit values."""
_FIFTH_BIT_FORMATS = ("q5_0", "q5_1")
"""Formats whose values take a fifth bit from a `qh` word per block."""
OFFSET_FORMATS = ("q4_1", "q5_1")
"""Formats whose blocks add a min m to d * q: their products take llama.cpp's Q8_1
activations, Q8_0 plus s = d * sum(q) per block, so that m's share of a block's product is
one multiplication, m * s."""

_EVEN_THEN_ODD = [*range(0, BLOCK, 2), *range(1, BLOCK, 2)]
"""Order of a Q4_0 block's values as its 16 bytes give them: low nibbles (the even values,
two 4-bit values to a byte in value order) first, then the high nibbles (odd values)."""


def int8_dot_isa(target: Target) -> str | None:
    """VNNI or AVX2 where `target` (an x86 CPU) has them, SDOT where it is an aarch64 CPU
    with dotprod; None: the float path (aarch64 without dotprod among them)."""
    if target.kind.name != "llvm":
        return None

    def has(feature: str) -> bool:
        return bool(codegen.target_has_features(feature, target))

    if "aarch64" in str(target.attrs.get("mtriple", "")):
        return SDOT if has("dotprod") else None
    if not has("avx2"):
        return None

    if has("avxvnni") or (has("avx512vnni") and has("avx512vl")):
        return VNNI
    return AVX2


Rows = int | tirx.Var
"""Token rows of a product: a number, or the model's run-time row count (a TIR variable)."""


def quantize_activations(rows: Rows, columns: int, with_sums: bool = False) -> tirx.PrimFunc:
    """`main(x float32 [rows, columns], q int8 [rows, columns], d float16 [rows, blocks])`:
    llama.cpp's reference Q8_0 quantization of each block of BLOCK values, a row to each
    parallel task (one row, the decode step's: no parallel launch). `with_sums`: its Q8_1,
    with a last output `s float16 [rows, blocks]`, fp16(sum(q) * d) with d unrounded."""
    blocks = columns // BLOCK
    row_loop = T.serial if _is_one(rows) else T.parallel

    @T.prim_func(s_tir=True)
    def main(
        x: T.Buffer((rows, columns), "float32"),
        q: T.Buffer((rows, columns), "int8"),
        d: T.Buffer((rows, blocks), "float16"),
        s: T.Buffer((rows, blocks), "float16"),
    ) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True, "tirx.is_scheduled": True})
        with T.sblock("root"):  # block-rooted, as Relax's analyses of call_tir kernels expect
            for i in row_loop(rows):
                for b in range(blocks):
                    amax = T.alloc_buffer((1,), "float32")
                    amax[0] = T.float32(0)
                    for lane in range(BLOCK):
                        amax[0] = T.max(amax[0], T.fabs(x[i, b * BLOCK + lane]))
                    scale = amax[0] / T.float32(127)
                    inverse = T.Select(scale != T.float32(0), T.float32(1) / scale, T.float32(0))
                    scaled = x[i, T.ramp(b * BLOCK, 1, BLOCK)] * T.broadcast(inverse, BLOCK)
                    q[i, T.ramp(b * BLOCK, 1, BLOCK)] = T.Cast("int8x32", _round_half_away(scaled))
                    d[i, b] = T.Cast("float16", scale)
                    if with_sums:
                        total = T.alloc_buffer((1,), "int32")
                        total[0] = 0
                        for lane in range(BLOCK):
                            total[0] = total[0] + T.Cast("int32", q[i, b * BLOCK + lane])
                        s[i, b] = T.Cast("float16", T.Cast("float32", total[0]) * scale)

    return main if with_sums else without_params(main, "s")


def without_params(func: tirx.PrimFunc, *names: str) -> tirx.PrimFunc:
    """`func` without the parameters `names` (buffers its body, as built, does not use)."""
    kept = [param for param in func.params if param.name not in names]
    return tirx.PrimFunc(kept, func.body, func.ret_type, func.attrs)


def _is_one(rows: Rows) -> bool:
    return isinstance(rows, int) and rows == 1


def _round_half_away(value: tirx.Expr) -> tirx.Expr:
    """C's roundf on a vector of BLOCK values: to nearest, halves away from zero (the
    fraction is exact in fp32)."""
    whole = tirx.trunc(value)
    fraction = value - whole

    def lanes(number: float) -> tirx.Expr:
        return T.broadcast(T.float32(number), BLOCK)

    up = tirx.Select(fraction >= lanes(0.5), lanes(1), lanes(0))
    down = tirx.Select(fraction <= lanes(-0.5), lanes(-1), lanes(0))
    return whole + up + down


def block_sum(w: tirx.Expr, x: tirx.Expr, isa: str, signed_weights: bool) -> tirx.Expr:
    """Sum of w * x over 32 int8 pairs, as eight int32 partial sums. Weights not
    `signed_weights` (0..15) are multiplied as the unsigned bytes they are, as they stand."""
    if isa == SDOT:
        return _sdot_block(w, x)
    magnitude, signed = w, x
    if signed_weights:
        magnitude = T.call_llvm_pure_intrin("int8x32", "llvm.x86.avx2.psign.b", w, w)
        signed = T.call_llvm_pure_intrin("int8x32", "llvm.x86.avx2.psign.b", x, w)
    if isa == VNNI:
        zeros = T.broadcast(T.int32(0), 8)
        return T.call_llvm_pure_intrin(
            "int32x8", "llvm.x86.avx512.vpdpbusd.256", zeros, magnitude, signed
        )
    pairs = T.call_llvm_pure_intrin("int16x16", "llvm.x86.avx2.pmadd.ub.sw", magnitude, signed)
    ones = T.broadcast(T.int16(1), 16)
    return T.call_llvm_pure_intrin("int32x8", "llvm.x86.avx2.pmadd.wd", pairs, ones)


def _sdot_block(w: tirx.Expr, x: tirx.Expr) -> tirx.Expr:
    """`block_sum` on aarch64: each 16-byte half through `sdot` (signed by signed, so the
    weights need no sign move), the two int32x4 results side by side as eight lanes."""

    def half(vector: tirx.Expr, start: int) -> tirx.Expr:
        return T.Shuffle([vector], [*range(start, start + 16)])

    zeros = T.broadcast(T.int32(0), 4)
    sums = [
        T.call_llvm_pure_intrin(
            "int32x4", "llvm.aarch64.neon.sdot.v4i32.v16i8", zeros, half(w, s), half(x, s)
        )
        for s in (0, 16)
    ]
    return T.Shuffle(sums, [*range(8)])


def _nibble_block(words: tirx.Expr, fifth_bits: tirx.Expr | None, offset: int) -> tirx.Expr:
    """A 4-bit block's four uint32 words (and, for Q5_0 / Q5_1, its word of fifth bits,
    bit v for value v) as int8 values q - `offset`, in `_EVEN_THEN_ODD` order."""
    packed = T.reinterpret("uint8x16", words)
    low = packed & T.broadcast(T.uint8(15), 16)
    high = packed >> T.broadcast(T.uint8(4), 16)
    values = T.Shuffle(
        [T.reinterpret("int8x16", low), T.reinterpret("int8x16", high)], [*range(32)]
    )
    if fifth_bits is not None:
        shifts = T.Shuffle([T.ramp(T.uint32(0), T.uint32(1), BLOCK)], _EVEN_THEN_ODD)
        bits = (T.broadcast(fifth_bits, BLOCK) >> shifts) & T.broadcast(T.uint32(1), BLOCK)
        values = values + T.Cast("int8x32", bits) * T.broadcast(T.int8(16), BLOCK)
    return values - T.broadcast(T.int8(offset), BLOCK) if offset else values


def weight_block(
    fmt_name: str, qs: tirx.Buffer, qh: tirx.Buffer, j: tirx.Expr, b: tirx.Expr
) -> tirx.Expr:
    """Block `b` of weight row `j` as 32 int8 values: Q8_0's as stored, the 4-bit formats'
    (with Q5_0 / Q5_1's fifth bits) less their `_SIGNED_OFFSET`, in `_EVEN_THEN_ODD` order."""
    if fmt_name == "q8_0":
        return qs[j, T.ramp(b * BLOCK, 1, BLOCK)]
    fifth_bits = qh[j, b] if fmt_name in _FIFTH_BIT_FORMATS else None
    words = qs[j, T.ramp(b * 4, 1, 4)]
    return _nibble_block(words, fifth_bits, _SIGNED_OFFSET.get(fmt_name, 0))


def activation_block(fmt_name: str, xq: tirx.Buffer, i: tirx.Expr, b: tirx.Expr) -> tirx.Expr:
    """Block `b` of quantized activation row `i`, in the order `weight_block` gives."""
    block = xq[i, T.ramp(b * BLOCK, 1, BLOCK)]
    return block if fmt_name == "q8_0" else T.Shuffle([block], _EVEN_THEN_ODD)


def weight_planes(fmt_name: str, features: int, columns: int) -> tuple[tuple[int, int], str]:
    """Shape and dtype of `fmt_name`'s `qs` plane: int8 values, or 4-bit values in uint32s."""
    if fmt_name == "q8_0":
        return (features, columns), "int8"
    return (features, columns // 8), "uint32"


def check_supported(fmt_name: str, isa: str) -> None:
    """Refuses, by name, a weight format or an ISA the integer kernels do not have."""
    if fmt_name not in INT8_DOT_FORMATS:
        raise ValueError(
            f"no int8 dot product for {fmt_name!r}; supported: {', '.join(INT8_DOT_FORMATS)}"
        )
    if isa not in ISAS:
        raise ValueError(f"unknown integer dot ISA {isa!r}; supported: {', '.join(ISAS)}")


def int8_gemv(fmt_name: str, rows: Rows, features: int, columns: int, isa: str) -> tirx.PrimFunc:
    """`main(xq int8 [rows, columns], xd float16 [rows, blocks], qs, d, out float32 [rows,
    features])`: quantized activations times the weight planes `qs`, `d` of `fmt_name`.
    Q5_0 / Q5_1 take their fifth bits `qh` after `qs`; OFFSET_FORMATS take the activations'
    block sums `xs` after `xd` (`quantize_activations(..., with_sums=True)`) and the
    weights' mins `m` after `d`, adding m * s per block, as llama.cpp's
    `ggml_vec_dot_q4_1_q8_1` / `ggml_vec_dot_q5_1_q8_1` do."""
    check_supported(fmt_name, isa)
    blocks = columns // BLOCK
    offset = fmt_name in OFFSET_FORMATS

    @T.macro
    def one_output_at_a_time(xq, xd, xs, qs, qh, d, m, out):
        for j in T.parallel(features):
            for i in range(rows):
                acc = T.alloc_buffer((8,), "float32")
                acc[T.ramp(0, 1, 8)] = T.broadcast(T.float32(0), 8)
                mins = T.alloc_buffer((1,), "float32")
                mins[0] = T.float32(0)
                for b in range(blocks):
                    scale = T.Cast("float32", d[j, b]) * T.Cast("float32", xd[i, b])
                    w = weight_block(fmt_name, qs, qh, j, b)
                    sums = block_sum(w, activation_block(fmt_name, xq, i, b), isa, not offset)
                    acc[T.ramp(0, 1, 8)] = acc[T.ramp(0, 1, 8)] + T.broadcast(scale, 8) * T.Cast(
                        "float32x8", sums
                    )
                    if offset:
                        mins[0] = mins[0] + T.Cast("float32", m[j, b]) * T.Cast("float32", xs[i, b])
                out[i, j] = (
                    acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7]
                ) + mins[0]

    return product_kernel(fmt_name, rows, features, columns, one_output_at_a_time)


def product_kernel(
    fmt_name: str, rows: Rows, features: int, columns: int, body: object
) -> tirx.PrimFunc:
    """The product kernels' signature (`int8_gemv`'s) around `body`, a `T.macro` of the
    buffers (xq, xd, xs, qs, qh, d, m, out) that writes `out`; without the parameters
    `fmt_name`'s planes leave out."""
    blocks = columns // BLOCK
    weight_shape, weight_dtype = weight_planes(fmt_name, features, columns)

    @T.prim_func(s_tir=True)
    def main(
        xq: T.Buffer((rows, columns), "int8"),
        xd: T.Buffer((rows, blocks), "float16"),
        xs: T.Buffer((rows, blocks), "float16"),
        qs: T.Buffer(weight_shape, weight_dtype),
        qh: T.Buffer((features, blocks), "uint32"),
        d: T.Buffer((features, blocks), "float16"),
        m: T.Buffer((features, blocks), "float16"),
        out: T.Buffer((rows, features), "float32"),
    ) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True, "tirx.is_scheduled": True})
        with T.sblock("root"):  # block-rooted, as Relax's analyses of call_tir kernels expect
            body(xq, xd, xs, qs, qh, d, m, out)

    return without_params(main, *unused_params(fmt_name))


def unused_params(fmt_name: str) -> list[str]:
    """The parameters of a product kernel `fmt_name`'s planes leave out: the block sums and
    mins but for OFFSET_FORMATS, the fifth bits but for Q5_0 / Q5_1."""
    offset, fifth = fmt_name in OFFSET_FORMATS, fmt_name in _FIFTH_BIT_FORMATS
    return ([] if offset else ["xs", "m"]) + ([] if fifth else ["qh"])
