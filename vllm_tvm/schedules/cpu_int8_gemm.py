"""Integer-dot GEMM for many token rows (prefill): register blocks of rows x output features.

Why: `int8_gemv` (schedules/cpu_int8_dot.py) computes one output at a time, which suits a
decode row (the product is bound by the weight stream) but, over hundreds of prefill rows,
reloads and unpacks each weight block once per row and each activation block once per
feature. Here TOKEN_ROWS rows x FEATURES_PER_BLOCK features advance together over the
blocks of 32: each weight block is unpacked once per register block and serves
TOKEN_ROWS rows, each activation block FEATURES_PER_BLOCK features, and the block's
TOKEN_ROWS * FEATURES_PER_BLOCK accumulators (eight fp32 lanes each) stay in registers. A
parallel task owns TILE_FEATURES weight rows and walks every row block over them, so its
weight tile stays in L2 across row blocks while one row block's activations stay in L1
across the tile's feature groups. Activations are quantized once per row beforehand
(`quantize_activations`).

Per block the integer sum is the one llama.cpp's quantize-then-dot defines; it is taken
with VNNI's `vpdpbusd` (unsigned x signed bytes) without `int8_gemv`'s sign move where the
weights are signed: the activations are offset to unsigned, x + 128, once per row block,
and the sum starts from -128 * sum(w) (one `vpdpbusd` per weight block, shared by the
rows), so sum((x + 128) w) - 128 sum(w) = sum(x w) exactly in int32. AVX2 keeps the sign
move (`vpmaddubsw`'s int16 pairs would saturate on (x + 128) w). Row counts that are not a
multiple of TOKEN_ROWS finish with one-row blocks.
"""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as T

from vllm_tvm.schedules.cpu_int8_dot import (
    BLOCK,
    OFFSET_FORMATS,
    VNNI,
    Rows,
    activation_block,
    block_sum,
    check_supported,
    unused_params,
    weight_block,
    weight_planes,
    without_params,
)

TOKEN_ROWS = 4
"""Token rows of a register block."""

FEATURES_PER_BLOCK = 4
"""Output features of a register block."""

TILE_FEATURES = 16
"""Output features (weight rows) per parallel task."""

LANES = 8
"""int32 / fp32 lanes of one block's partial sums (a 256-bit register)."""


def int8_gemm(
    fmt_name: str,
    rows: Rows,
    features: int,
    columns: int,
    isa: str,
    token_rows: int = TOKEN_ROWS,
    features_per_block: int = FEATURES_PER_BLOCK,
) -> tirx.PrimFunc:
    """`int8_gemv`'s kernel (same parameters, same definition of each output) for many
    token rows, register-blocked `token_rows` x `features_per_block`. `features` must be a
    multiple of TILE_FEATURES and TILE_FEATURES of `features_per_block`."""
    check_supported(fmt_name, isa)
    if features % TILE_FEATURES or TILE_FEATURES % features_per_block:
        raise ValueError(
            f"int8_gemm needs output features ({features}) in whole tiles of {TILE_FEATURES}"
            f" and tiles in whole register blocks of {features_per_block} features"
        )
    blocks = columns // BLOCK
    offset = fmt_name in OFFSET_FORMATS
    # VNNI with signed weights: activations offset to unsigned (see the module docstring).
    shifted = isa == VNNI and not offset
    weight_shape, weight_dtype = weight_planes(fmt_name, features, columns)
    groups = TILE_FEATURES // features_per_block
    fpb = features_per_block

    def lanes(value: tirx.Expr) -> tirx.Expr:
        return T.broadcast(value, LANES)

    def unsigned_bytes(block: tirx.Expr) -> tirx.Expr:
        """x + 128 as a byte (x in -127..127): x with its sign bit flipped."""
        flipped = T.reinterpret("uint8x32", block) ^ T.broadcast(T.uint8(128), BLOCK)
        return T.reinterpret("int8x32", flipped)

    def dpbusd(start: tirx.Expr, unsigned: tirx.Expr, signed: tirx.Expr) -> tirx.Expr:
        return T.call_llvm_pure_intrin(
            "int32x8", "llvm.x86.avx512.vpdpbusd.256", start, unsigned, signed
        )

    @T.macro
    def register_block(xq, xd, xs, qs, qh, d, m, out, i0, j0, count):  # noqa: ANN001, ANN202
        acc = T.alloc_buffer((count, fpb, LANES), "float32")
        mins = T.alloc_buffer((count, fpb), "float32")
        w = T.alloc_buffer((fpb, BLOCK), "int8")
        start = T.alloc_buffer((fpb, LANES), "int32")
        x = T.alloc_buffer((count, BLOCK), "int8")
        for r in T.unroll(count):
            for f in T.unroll(fpb):
                acc[r, f, T.ramp(0, 1, LANES)] = lanes(T.float32(0))
                mins[r, f] = T.float32(0)
        for b in range(blocks):
            for f in T.unroll(fpb):
                w[f, T.ramp(0, 1, BLOCK)] = weight_block(fmt_name, qs, qh, j0 + f, b)
                if shifted:
                    ones = T.broadcast(T.int8(1), BLOCK)
                    total = dpbusd(lanes(T.int32(0)), ones, w[f, T.ramp(0, 1, BLOCK)])
                    start[f, T.ramp(0, 1, LANES)] = total * lanes(T.int32(-128))
            for r in T.unroll(count):
                block = activation_block(fmt_name, xq, i0 + r, b)
                x[r, T.ramp(0, 1, BLOCK)] = unsigned_bytes(block) if shifted else block
            for r in T.unroll(count):
                for f in T.unroll(fpb):
                    scale = T.Cast("float32", d[j0 + f, b]) * T.Cast("float32", xd[i0 + r, b])
                    weights = w[f, T.ramp(0, 1, BLOCK)]
                    values = x[r, T.ramp(0, 1, BLOCK)]
                    if shifted:
                        sums = dpbusd(start[f, T.ramp(0, 1, LANES)], values, weights)
                    else:
                        sums = block_sum(weights, values, isa, not offset)
                    acc[r, f, T.ramp(0, 1, LANES)] = acc[r, f, T.ramp(0, 1, LANES)] + lanes(
                        scale
                    ) * T.Cast("float32x8", sums)
                    if offset:
                        mins[r, f] = mins[r, f] + T.Cast("float32", m[j0 + f, b]) * T.Cast(
                            "float32", xs[i0 + r, b]
                        )
        for r in T.unroll(count):
            for f in T.unroll(fpb):
                out[i0 + r, j0 + f] = _lane_sum(acc, r, f) + mins[r, f]

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
            for tile in T.parallel(features // TILE_FEATURES):
                for row_block in range(rows // token_rows):
                    for group in range(groups):
                        register_block(
                            xq, xd, xs, qs, qh, d, m, out,
                            row_block * token_rows, tile * TILE_FEATURES + group * fpb,
                            token_rows,
                        )  # fmt: skip
                for row in range(rows % token_rows):
                    for group in range(groups):
                        register_block(
                            xq, xd, xs, qs, qh, d, m, out,
                            rows - rows % token_rows + row, tile * TILE_FEATURES + group * fpb,
                            1,
                        )  # fmt: skip

    return without_params(main, *unused_params(fmt_name))


def _lane_sum(acc: tirx.Buffer, r: tirx.Expr, f: tirx.Expr) -> tirx.Expr:
    """The horizontal sum of an accumulator's LANES lanes, in lane order."""
    total = acc[r, f, 0]
    for lane in range(1, LANES):
        total = total + acc[r, f, lane]
    return total
