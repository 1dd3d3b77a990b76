"""Integer dot products of K-quant weights with Q8_K activations on x86 CPUs, as llama.cpp's.

Why this exists: a Q4_K_M file is mostly Q4_K and Q6_K weights, which the fused matmuls of
model_defs/quant_linear.py widen to fp32 in registers (one float FMA per weight). llama.cpp
multiplies them by activations quantized to its Q8_K instead: per super-block of 256
values an fp32 scale d (the value of largest magnitude maps to -127), int8 values, and the
sum of each 16 values (`bsums`). Then, per super-block, with d_w the weight's fp16 scale:

    d_w * d_x * sum_s sc_s * (u_s . x_s)  -  e_w * d_x * sum_t c_t * bsum_t

where u are the weight's unsigned values (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31,
Q6_K 0..63), sc_s the integer scale of sub-block s (32 values for Q4_K / Q5_K, 16 for the
others) and the second term the part the unsigned values leave out: for Q2_K / Q4_K / Q5_K
e_w = dmin and c_t the min of the sub-block holding the 16 values t; for Q6_K and Q3_K,
whose values are u - 32 and u - 4, e_w = d_w and c_t = 32 * sc_t or 4 * sc_t
(`ggml_vec_dot_q2_K_q8_K` ... `ggml_vec_dot_q6_K_q8_K`; every sum but the last is an
exact integer). This module holds:

- `quantize_activations_q8_k`: llama.cpp's reference `quantize_row_q8_K` (its `nearest_int`
  rounds halves to even). The values are stored in the order the kernels unpack weights
  in, per 32: the even values, then the odd ones (low, then high nibbles of a weight's
  packed words), so that no product shuffles them; `bsums` count values in value order.
- `int8_kquant_gemv`: those activations times Q2_K, Q3_K, Q4_K, Q5_K or Q6_K planes
  (checkpoints/weight_formats.py). Per 32 values one integer dot product: VNNI `vpdpbusd`
  then the sub-block scales multiplied in (`vpmulld`), or AVX2's `vpmaddubsw` then
  `vpmaddwd` by the scales; the super-block's eight int32 lanes then scaled once in fp32,
  the second term from `vpmaddwd` of the mins by `bsums`.

Both kernels take a run-time row count or a fixed one, scheduled as the Q8_0 ones
(schedules/cpu_int8_dot.py, which also chooses the ISA). compiler/int8_activations.py
routes a model's K-quant products here with `--cpu-int8-activations`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx
from tvm.script import tirx as T

from vllm_tvm.checkpoints.weight_formats import FORMATS
from vllm_tvm.schedules.cpu_int8_dot import _EVEN_THEN_ODD, AVX2, VNNI, Rows, _is_one, _nibble_block

SUPER_BLOCK = 256
"""Values per Q8_K block of activations and per K-quant weight block (llama.cpp's QK_K)."""

GROUP = 32
"""Values one integer dot product takes (a 256-bit vector of bytes)."""

GROUPS = SUPER_BLOCK // GROUP
SUMS = SUPER_BLOCK // 16
"""`bsums` per super-block: one per 16 values."""


@dataclass(frozen=True)
class _KQuant:
    """How a K-quant's unsigned values and scales meet Q8_K activations.

    `sub_block`: values per integer scale `sc`; `offset`: what its values subtract (times
    the scale, through `bsums`; 0 for the formats with a `dmin` and 6-bit mins `mn`)."""

    sub_block: int
    offset: int = 0


KQUANTS = {
    "q4_k": _KQuant(32),
    "q5_k": _KQuant(32),
    "q6_k": _KQuant(16, offset=32),
    "q3_k": _KQuant(16, offset=4),
    "q2_k": _KQuant(16),
}
INT8_KQUANT_FORMATS = tuple(KQUANTS)
"""Weight formats `int8_kquant_gemv` multiplies."""
INT8_KQUANT_ISAS = (VNNI, AVX2)
"""The ISAs with K-quant kernels (x86); elsewhere K-quant products stay on the float path."""


def quantize_activations_q8_k(rows: Rows, columns: int) -> tirx.PrimFunc:
    """`main(x float32 [rows, columns], q int8 [rows, columns], d float32 [rows, supers],
    bsums int16 [rows, columns / 16])`: llama.cpp's reference Q8_K quantization of each
    super-block (d = 1 / (-127 / v), v its value of largest magnitude, first of equals;
    q = nearest_int(x * -127 / v), at most 127; d = 0 and q = 0 for a block of zeros), q
    stored even values first in each 32; a row to each parallel task (one row: no launch)."""
    supers = columns // SUPER_BLOCK
    row_loop = T.serial if _is_one(rows) else T.parallel

    @T.prim_func(s_tir=True)
    def main(
        x: T.Buffer((rows, columns), "float32"),
        q: T.Buffer((rows, columns), "int8"),
        d: T.Buffer((rows, supers), "float32"),
        bsums: T.Buffer((rows, columns // 16), "int16"),
    ) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True, "tirx.is_scheduled": True})
        with T.sblock("root"):  # block-rooted, as Relax's analyses of call_tir kernels expect
            for i in row_loop(rows):
                for b in range(supers):
                    amax = T.alloc_buffer((1,), "float32")
                    largest = T.alloc_buffer((1,), "float32")
                    amax[0] = T.float32(0)
                    largest[0] = T.float32(0)
                    for v in range(SUPER_BLOCK):
                        if T.fabs(x[i, b * SUPER_BLOCK + v]) > amax[0]:
                            amax[0] = T.fabs(x[i, b * SUPER_BLOCK + v])
                            largest[0] = x[i, b * SUPER_BLOCK + v]
                    nonzero = amax[0] != T.float32(0)
                    iscale = T.Select(nonzero, T.float32(-127) / largest[0], T.float32(0))
                    for g in range(GROUPS):
                        start = b * SUPER_BLOCK + g * GROUP
                        scaled = x[i, T.ramp(start, 1, GROUP)] * T.broadcast(iscale, GROUP)
                        values = T.min(_nearest_int(scaled), T.broadcast(T.int32(127), GROUP))
                        q[i, T.ramp(start, 1, GROUP)] = T.Shuffle(
                            [T.Cast("int8x32", values)], _EVEN_THEN_ODD
                        )
                    d[i, b] = T.Select(nonzero, T.float32(1) / iscale, T.float32(0))
                    for t in range(SUMS):
                        # Values 16 h .. 16 h + 15 of a 32: lanes 8 h .. 8 h + 7 of the
                        # even ones and of the odd ones.
                        start = b * SUPER_BLOCK + (t // 2) * GROUP + (t % 2) * 8
                        total = T.alloc_buffer((1,), "int32")
                        total[0] = 0
                        for lane in range(8):
                            total[0] = (
                                total[0]
                                + T.Cast("int32", q[i, start + lane])
                                + T.Cast("int32", q[i, start + 16 + lane])
                            )
                        bsums[i, b * SUMS + t] = T.Cast("int16", total[0])

    return main


def _nearest_int(value: tirx.Expr) -> tirx.Expr:
    """llama.cpp's `nearest_int` on GROUP fp32 values (|value| < 2**22): adding 1.5 * 2**23
    leaves the rounded integer (halves to even) in the low mantissa bits."""
    shifted = value + T.broadcast(T.float32(12582912), GROUP)
    bits = T.reinterpret("int32x32", shifted)
    mantissa = bits & T.broadcast(T.int32(0x007FFFFF), GROUP)
    return mantissa - T.broadcast(T.int32(0x00400000), GROUP)


def _bits_by_value(word: tirx.Expr) -> tirx.Expr:
    """Bit v of a uint32 word for each value v of a 32, in even-then-odd order, as int8."""
    shifts = T.Shuffle([T.ramp(T.uint32(0), T.uint32(1), GROUP)], _EVEN_THEN_ODD)
    bits = (T.broadcast(word, GROUP) >> shifts) & T.broadcast(T.uint32(1), GROUP)
    return T.Cast("int8x32", bits)


_CRUMB_LANES = [(v % 4) * 8 + v // 4 for v in _EVEN_THEN_ODD]
"""Where value v of a 32 lies among its 2-bit fields split by position in their byte (the
fields at bits 0 of the 8 bytes, then those at bits 2, 4, 6), in even-then-odd order."""


def _crumbs_by_value(words: tirx.Expr) -> tirx.Expr:
    """The 2-bit fields of two uint32 words (16 to a word, in value order) in even-then-odd
    order, as int8."""
    packed = T.reinterpret("uint8x8", words)
    fields = [
        T.reinterpret(
            "int8x8", (packed >> T.broadcast(T.uint8(shift), 8)) & T.broadcast(T.uint8(3), 8)
        )
        for shift in (0, 2, 4, 6)
    ]
    return T.Shuffle(fields, _CRUMB_LANES)


def _scaled_dot(
    weights: tirx.Expr, activations: tirx.Expr, scales: tuple[tirx.Expr, tirx.Expr], isa: str
) -> tirx.Expr:
    """The products of 32 unsigned weight bytes with 32 int8 activations (both in
    even-then-odd order), times each value's sub-block scale, as eight int32 sums.

    `scales`: the int32 scales of the 32's first and last 16 values (equal for sub-blocks
    of 32). Four adjacent bytes (a VNNI lane) or two int16 pairs (AVX2) hold values of one
    16: even-then-odd lanes 0-7 and 16-23 are values 0-15."""
    first, last = scales
    if isa == VNNI:
        zeros = T.broadcast(T.int32(0), 8)
        sums = T.call_llvm_pure_intrin(
            "int32x8", "llvm.x86.avx512.vpdpbusd.256", zeros, weights, activations
        )
        lanes = T.Shuffle([T.broadcast(first, 4), T.broadcast(last, 4)], [0, 1, 4, 5, 2, 3, 6, 7])
        return sums * lanes
    pairs = T.call_llvm_pure_intrin("int16x16", "llvm.x86.avx2.pmadd.ub.sw", weights, activations)
    halves = [T.broadcast(T.Cast("int16", s), 8) for s in (first, last)]
    lanes = T.Shuffle(halves, [*range(4), *range(8, 12), *range(4, 8), *range(12, 16)])
    return T.call_llvm_pure_intrin("int32x8", "llvm.x86.avx2.pmadd.wd", pairs, lanes)


def int8_kquant_gemv(
    fmt_name: str, rows: Rows, features: int, columns: int, isa: str
) -> tirx.PrimFunc:
    """`main(xq int8 [rows, columns], xd float32 [rows, supers], bsums int16 [rows, columns /
    16], <the planes of fmt_name, in the format's order>, out float32 [rows, features])`:
    Q8_K activations (`quantize_activations_q8_k`) times a K-quant weight."""
    if fmt_name not in KQUANTS:
        raise ValueError(
            f"no int8 K-quant dot product for {fmt_name!r}; "
            f"supported: {', '.join(INT8_KQUANT_FORMATS)}"
        )
    if isa not in INT8_KQUANT_ISAS:
        raise ValueError(
            f"unknown integer dot ISA {isa!r}; supported: {', '.join(INT8_KQUANT_ISAS)}"
        )
    kquant, fmt = KQUANTS[fmt_name], FORMATS[fmt_name]
    with_offset = kquant.offset != 0
    supers = columns // SUPER_BLOCK
    shape = {p.name: (tuple(fmt.plane_shape(p, (features, columns))), p.dtype) for p in fmt.planes}
    absent = ((features, 1), "uint8")  # a plane the format does not have: never read

    (qs_shape, qs_dtype), (qh_shape, qh_dtype) = shape["qs"], shape.get("qh", absent)
    (sc_shape, sc_dtype), (mn_shape, mn_dtype) = shape["sc"], shape.get("mn", absent)
    d_shape, (dmin_shape, dmin_dtype) = shape["d"][0], shape.get("dmin", absent)

    def weight_group(qs: tirx.Buffer, qh: tirx.Buffer, j: tirx.Expr, g: tirx.Expr) -> tirx.Expr:
        """The unsigned values of 32-value group g of weight row j, even-then-odd."""
        if fmt_name in ("q2_k", "q3_k"):
            values = _crumbs_by_value(qs[j, T.ramp(g * 2, 1, 2)])
            if fmt_name == "q3_k":
                values = values + _bits_by_value(qh[j, g]) * T.broadcast(T.int8(4), GROUP)
            return values
        values = _nibble_block(qs[j, T.ramp(g * 4, 1, 4)], None, 0)
        if fmt_name == "q5_k":
            values = values + _bits_by_value(qh[j, g]) * T.broadcast(T.int8(16), GROUP)
        elif fmt_name == "q6_k":
            high = _crumbs_by_value(qh[j, T.ramp(g * 2, 1, 2)])
            values = values + high * T.broadcast(T.int8(16), GROUP)
        return values

    def group_scales(sc: tirx.Buffer, j: tirx.Expr, g: tirx.Expr) -> tuple[tirx.Expr, tirx.Expr]:
        if kquant.sub_block == GROUP:
            scale = T.Cast("int32", sc[j, g])
            return scale, scale
        return T.Cast("int32", sc[j, 2 * g]), T.Cast("int32", sc[j, 2 * g + 1])

    def offsets(sc: tirx.Buffer, mn: tirx.Buffer, j: tirx.Expr, b: tirx.Expr) -> tirx.Expr:
        """c_t of super-block b as int16x16: the min of each 16's sub-block, or the
        offset times each 16's scale."""
        if kquant.offset:
            scales = T.Cast("int16x16", sc[j, T.ramp(b * SUMS, 1, SUMS)])
            return scales * T.broadcast(T.int16(kquant.offset), SUMS)
        if kquant.sub_block == 16:
            return T.Cast("int16x16", mn[j, T.ramp(b * SUMS, 1, SUMS)])
        mins = T.Cast("int16x8", mn[j, T.ramp(b * GROUPS, 1, GROUPS)])
        return T.Shuffle([mins, mins], [t // 2 + GROUPS * (t % 2) for t in range(SUMS)])

    @T.prim_func(s_tir=True)
    def main(
        xq: T.Buffer((rows, columns), "int8"),
        xd: T.Buffer((rows, supers), "float32"),
        bsums: T.Buffer((rows, columns // 16), "int16"),
        qs: T.Buffer(qs_shape, qs_dtype),
        qh: T.Buffer(qh_shape, qh_dtype),
        sc: T.Buffer(sc_shape, sc_dtype),
        mn: T.Buffer(mn_shape, mn_dtype),
        d: T.Buffer(d_shape, "float16"),
        dmin: T.Buffer(dmin_shape, dmin_dtype),
        out: T.Buffer((rows, features), "float32"),
    ) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True, "tirx.is_scheduled": True})
        with T.sblock("root"):  # block-rooted, as Relax's analyses of call_tir kernels expect
            for j in T.parallel(features):
                for i in range(rows):
                    acc = T.alloc_buffer((8,), "float32")
                    acc[T.ramp(0, 1, 8)] = T.broadcast(T.float32(0), 8)
                    for b in range(supers):
                        dots = T.alloc_buffer((8,), "int32")
                        dots[T.ramp(0, 1, 8)] = T.broadcast(T.int32(0), 8)
                        for s in T.unroll(GROUPS):
                            g = b * GROUPS + s
                            dots[T.ramp(0, 1, 8)] = dots[T.ramp(0, 1, 8)] + _scaled_dot(
                                weight_group(qs, qh, j, g),
                                xq[i, T.ramp(g * GROUP, 1, GROUP)],
                                group_scales(sc, j, g),
                                isa,
                            )
                        left_out = T.call_llvm_pure_intrin(
                            "int32x8",
                            "llvm.x86.avx2.pmadd.wd",
                            offsets(sc, mn, j, b),
                            bsums[i, T.ramp(b * SUMS, 1, SUMS)],
                        )
                        scale = T.Cast("float32", d[j, b]) * xd[i, b]
                        if with_offset:
                            acc[T.ramp(0, 1, 8)] = acc[T.ramp(0, 1, 8)] + T.broadcast(
                                scale, 8
                            ) * T.Cast("float32x8", dots[T.ramp(0, 1, 8)] - left_out)
                        else:
                            min_scale = T.Cast("float32", dmin[j, b]) * xd[i, b]
                            acc[T.ramp(0, 1, 8)] = (
                                acc[T.ramp(0, 1, 8)]
                                + T.broadcast(scale, 8) * T.Cast("float32x8", dots[T.ramp(0, 1, 8)])
                                - T.broadcast(min_scale, 8) * T.Cast("float32x8", left_out)
                            )
                    out[i, j] = (
                        acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7]
                    )

    return _with_params(main, ["xq", "xd", "bsums", *(p.name for p in fmt.planes), "out"])


def _with_params(func: tirx.PrimFunc, names: list[str]) -> tirx.PrimFunc:
    """`func` with its parameters `names`, in that order (the others its body, as built,
    does not use)."""
    by_name = {param.name: param for param in func.params}
    return tirx.PrimFunc([by_name[name] for name in names], func.body, func.ret_type, func.attrs)
