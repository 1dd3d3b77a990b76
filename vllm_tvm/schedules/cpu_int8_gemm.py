"""Integer-dot GEMM for many token rows (prefill): register blocks of rows x output features.

Why: `int8_gemv` (schedules/cpu_int8_dot.py) computes one output at a time, which suits a
decode row (the product is bound by the weight stream) but, over hundreds of prefill rows,
reloads and unpacks each weight block once per row and each activation block once per
feature. Here TOKEN_ROWS rows x FEATURES_PER_BLOCK features advance together over the
blocks of 32: each weight block is unpacked once per register block and serves
TOKEN_ROWS rows, each activation block FEATURES_PER_BLOCK features, and the block's
TOKEN_ROWS accumulators (eight fp32 lanes each, the features' partial sums side by side)
stay in registers. A
parallel task owns TILE_FEATURES weight rows and walks every row block over them, so its
weight tile stays in L2 across row blocks while one row block's activations stay in L1
across the tile's feature groups. Activations are quantized once per row beforehand
(`quantize_activations`).

Per block the integer sum is the one llama.cpp's quantize-then-dot defines; it is taken
with VNNI's `vpdpbusd` (unsigned x signed bytes) without `int8_gemv`'s sign move where the
weights are signed: the activations are offset to unsigned, x + 128, and the folded sums
get -128 * sum(w) added (`vpdpbusd` by ones per weight block, folded the same way once
and shared by the rows), so sum((x + 128) w) - 128 sum(w) = sum(x w) exactly in int32.
AVX2 keeps the sign
move (`vpmaddubsw`'s int16 pairs would saturate on (x + 128) w), and aarch64's `sdot` takes
signed bytes as they are. The features' eight-lane block sums are folded into one register
(`fold_features`: pairwise sums of lanes, `vphaddd` / `addp`) before the fp32 scaling, so that
one conversion and one multiply-add serve the block's features. Row counts that are not a
multiple of TOKEN_ROWS finish with one-row blocks.
"""

from __future__ import annotations

from collections.abc import Callable

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
    int8_gemv,
    product_kernel,
    weight_block,
)

TOKEN_ROWS = 8
"""Token rows of a register block."""

FEATURES_PER_BLOCK = 8
"""Output features of a register block: their block sums are folded into one register."""

TILE_FEATURES = 16
"""Output features (weight rows) per parallel task."""

LANES = 8
"""int32 / fp32 lanes of one block's partial sums (a 256-bit register)."""

_GROUP = 4
"""Lanes per 128-bit group, within which pairwise sums pair neighbours (as `vphaddd`)."""


def _pair_indices(a: list[int], b: list[int]) -> tuple[list[int], list[int]]:
    """Indices into two concatenated vectors whose lanes `a`, `b` label by feature: added
    lane by lane, the two shuffles give one vector of both's sums. Neighbours while they
    share a feature, per 128-bit group as `vphaddd` does (LLVM lowers it so); then the
    halves (a 4-feature fold of 8 lanes holds each feature twice, once per half)."""
    lanes = len(a)
    if a[0] == a[1]:
        evens = []
        for group in range(0, lanes, min(_GROUP, lanes)):
            evens += [group, group + 2, lanes + group, lanes + group + 2][: min(_GROUP, lanes)]
        return evens, [index + 1 for index in evens]
    half = lanes // 2
    low = [*range(half), *range(lanes, lanes + half)]
    return low, [index + half for index in low]


def _fold(values: list, labels: list[list[int]], pair: Callable) -> tuple[object, list[int]]:
    """`values` (a register block's per-feature vectors, lanes labelled by feature) folded
    pairwise into one vector by `pair(a, b, evens, odds)`; with its lanes' labels."""
    while len(values) > 1:
        folded, folded_labels = [], []
        for index in range(0, len(values), 2):
            la, lb = labels[index], labels[index + 1]
            evens, odds = _pair_indices(la, lb)
            assert [(la + lb)[i] for i in evens] == [(la + lb)[i] for i in odds]
            folded.append(pair(values[index], values[index + 1], evens, odds))
            folded_labels.append([(la + lb)[i] for i in evens])
        values, labels = folded, folded_labels
    return values[0], labels[0]


def _starting_labels(count: int, lanes: int) -> list[list[int]]:
    if count > lanes or count & (count - 1):
        raise ValueError(f"{count} features do not fold into {lanes} lanes (1, 2, 4 or 8)")
    return [[feature] * lanes for feature in range(count)]


def fold_features(sums: list[tirx.Expr], lanes: int = LANES) -> tirx.Expr:
    """One vector from a register block's per-feature block sums, adding lanes of the same
    feature pairwise until the features fill one register (`lane_features` says whose
    partial sum each lane holds)."""

    def pair(a: tirx.Expr, b: tirx.Expr, evens: list[int], odds: list[int]) -> tirx.Expr:
        return T.Shuffle([a, b], evens) + T.Shuffle([a, b], odds)

    return _fold(sums, _starting_labels(len(sums), lanes), pair)[0]


def lane_features(count: int, lanes: int = LANES) -> list[int]:
    """The feature (0..count-1) whose partial sum each lane of `fold_features` holds."""
    labels = _starting_labels(count, lanes)
    return _fold(labels, labels, lambda a, b, evens, odds: None)[1]


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
    token rows, register-blocked `token_rows` x `features_per_block` (2, 4 or 8).
    `features` must be a multiple of TILE_FEATURES and TILE_FEATURES of
    `features_per_block`."""
    check_supported(fmt_name, isa)
    if features % TILE_FEATURES or TILE_FEATURES % features_per_block or features_per_block < 2:
        raise ValueError(
            f"int8_gemm needs output features ({features}) in whole tiles of {TILE_FEATURES}"
            f" and tiles in whole register blocks of {features_per_block} (>= 2) features"
        )
    blocks = columns // BLOCK
    offset = fmt_name in OFFSET_FORMATS
    # VNNI with signed weights: activations offset to unsigned (see the module docstring).
    shifted = isa == VNNI and not offset
    groups = TILE_FEATURES // features_per_block
    fpb = features_per_block
    lane_feature = lane_features(fpb)
    first_lanes = [lane_feature.index(f) for f in range(fpb)]

    def lanes(value: tirx.Expr) -> tirx.Expr:
        return T.broadcast(value, LANES)

    def unsigned_bytes(block: tirx.Expr) -> tirx.Expr:
        """x + 128 as a byte (x in -127..127): x with its sign bit flipped."""
        flipped = T.reinterpret("uint8x32", block) ^ T.broadcast(T.uint8(128), BLOCK)
        return T.reinterpret("int8x32", flipped)

    def dpbusd(unsigned: tirx.Expr, signed: tirx.Expr) -> tirx.Expr:
        return T.call_llvm_pure_intrin(
            "int32x8", "llvm.x86.avx512.vpdpbusd.256", lanes(T.int32(0)), unsigned, signed
        )

    def per_lane(plane: tirx.Buffer, j0: tirx.Expr, b: tirx.Expr, first_only: bool) -> tirx.Expr:
        """fp32 lanes of `plane`'s value for each lane's feature (zero but on a feature's
        first lane if `first_only`: terms added once per feature)."""
        values = [
            T.Cast("float32", plane[j0 + f, b])
            if not first_only or lane == first_lanes[f]
            else T.float32(0)
            for lane, f in enumerate(lane_feature)
        ]
        return T.Shuffle(values, list(range(LANES)))

    @T.macro
    def register_block(xq, xd, xs, qs, qh, d, m, out, i0, j0, count):
        acc = T.alloc_buffer((count, LANES), "float32")
        w = T.alloc_buffer((fpb, BLOCK), "int8")
        correction = T.alloc_buffer((LANES,), "int32")
        for r in T.unroll(count):
            acc[r, T.ramp(0, 1, LANES)] = lanes(T.float32(0))
        for b in range(blocks):
            for f in T.unroll(fpb):
                w[f, T.ramp(0, 1, BLOCK)] = weight_block(fmt_name, qs, qh, j0 + f, b)
            if shifted:
                ones = T.broadcast(T.int8(1), BLOCK)
                totals = fold_features(
                    [dpbusd(ones, w[f, T.ramp(0, 1, BLOCK)]) for f in range(fpb)]
                )
                correction[T.ramp(0, 1, LANES)] = totals * lanes(T.int32(-128))
            weight_scales = per_lane(d, j0, b, first_only=False)
            for r in T.unroll(count):
                x = activation_block(fmt_name, xq, i0 + r, b)
                if shifted:
                    x_unsigned = unsigned_bytes(x)
                    sums = fold_features(
                        [dpbusd(x_unsigned, w[f, T.ramp(0, 1, BLOCK)]) for f in range(fpb)]
                    )
                    sums = sums + correction[T.ramp(0, 1, LANES)]
                else:
                    sums = fold_features(
                        [
                            block_sum(w[f, T.ramp(0, 1, BLOCK)], x, isa, not offset)
                            for f in range(fpb)
                        ]
                    )
                row_scale = lanes(T.Cast("float32", xd[i0 + r, b]))
                total = acc[r, T.ramp(0, 1, LANES)] + weight_scales * row_scale * T.Cast(
                    "float32x8", sums
                )
                if offset:
                    total = total + per_lane(m, j0, b, first_only=True) * lanes(
                        T.Cast("float32", xs[i0 + r, b])
                    )
                acc[r, T.ramp(0, 1, LANES)] = total
        for r in T.unroll(count):
            for f in T.unroll(fpb):
                out[i0 + r, j0 + f] = _feature_sum(acc, r, f, lane_feature)

    @T.macro
    def row_blocks_per_tile(xq, xd, xs, qs, qh, d, m, out):
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

    return product_kernel(fmt_name, rows, features, columns, row_blocks_per_tile)


def _feature_sum(
    acc: tirx.Buffer, r: tirx.Expr, f: tirx.Expr, lane_feature: list[int]
) -> tirx.Expr:
    """The sum, in lane order, of the accumulator lanes that hold feature `f`'s partial
    sums (`f` an unrolled loop's variable: the selections fold away)."""
    total = T.float32(0)
    for lane, owner in enumerate(lane_feature):
        total = total + T.Select(f == owner, acc[r, lane], T.float32(0))
    return total


def uses_gemm(rows: Rows, features: int) -> bool:
    """Whether a product of `rows` token rows takes `int8_gemm` rather than `int8_gemv`:
    any row count not known to be one (prefill, verify, batched decode) where the output
    features fill whole tiles. benchmarks/cpu_int8_prefill.py measured the register blocks
    ahead of `int8_gemv` from one run-time row up, and `int8_gemv` ahead of the float path
    only for a few rows."""
    return not (isinstance(rows, int) and rows == 1) and features % TILE_FEATURES == 0


def int8_product(fmt_name: str, rows: Rows, features: int, columns: int, isa: str) -> tirx.PrimFunc:
    """The integer product kernel `uses_gemm` chooses (same parameters either way)."""
    make = int8_gemm if uses_gemm(rows, features) else int8_gemv
    return make(fmt_name, rows, features, columns, isa)
