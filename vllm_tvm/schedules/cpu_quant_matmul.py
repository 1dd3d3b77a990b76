"""CPU schedule for the dequantize-inside NT matmul that quantized weights emit.

The function has a `dequantize` stage (planes -> fp32 weight, see model_defs/quant_linear.py)
feeding the fp32 `nt_matmul_acc` reduction. Left to the plain NT-matmul rule, the stage
would write the whole fp32 weight to memory on every call, which is what keeping weights
quantized is meant to avoid. Here, per parallel task of FEATURE_BLOCK output features:

- when the token rows are not known to be exactly one (prefill, batched decode), the
  task's weight rows are dequantized once into a small fp32 tile (vectorised over the eight
  values of a 4-bit word / a run of int8), which stays in L1/L2 and serves every token row
  of the call instead of being dequantized per row; for a single row (batch-1 decode with
  static shapes) the stage is inlined into the dot product instead, which saves the tile's
  store and reload;
- the dot products run with the reduction split into LANES partial sums (rfactor):
  vector registers of VECTOR fp32 values (WIDE_VECTOR where the target has AVX-512),
  LANES / vector independent accumulators so the FMA latency is hidden, and one horizontal
  sum per output;
- for a single row over 4-bit words, ROW_BLOCK features advance together over k, so each
  activation vector loaded serves ROW_BLOCK weight rows (register blocking); int8 weights
  (Q8_0, FP8), whose product is bound by the weight stream, keep one feature at a time;
- for several rows (speculative verify, prefill, batched decode), TOKEN_BLOCK token rows x
  TOKEN_FEATURE_BLOCK features advance together over k from the tile: each tile vector
  loaded serves TOKEN_BLOCK rows and each activation vector TOKEN_FEATURE_BLOCK features,
  their partial sums in registers, one vector per output (the block's outputs are the
  independent accumulators), so the sums are taken in another order than the one-row-at-a-
  time path's (token_block 1; outputs within ~1e-6 relative of it). The row count, symbolic
  there, is padded to a multiple of TOKEN_BLOCK (see `_pad_token_rows`).

Products whose output features are not a whole number of FEATURE_BLOCK blocks are left to
the plain rule (see `_whole_feature_blocks`).

Measured on the 2-core Zen 3 box, single thread, a 3072x576 Q4_1 GEMV: 0.30 ms with the
tile, 0.28 ms inlined, 0.45 ms with the plain rule after inlining the stage (LLVM cannot
vectorise the word/shift indexing), 0.48 ms for the fp32 weight with the plain rule; at 32
token rows the tile halves the time of inlining (4.9 vs 9.1 ms). The AVX-512 width and the
register blocks: benchmarks/cpu_quant_gemv.py (docs/BENCHMARKS.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.target import Target, codegen

from vllm_tvm.checkpoints.weight_formats import DEQUANTIZE_BLOCK
from vllm_tvm.schedules.cpu_matmul import match_nt_matmul

FEATURE_BLOCK = 16
"""Output features per parallel task (and rows of the dequantized tile)."""

LANES = 32
"""Partial sums per output feature: the reduction's vector width times its accumulators."""

VECTOR = 8
"""fp32 values per vector register (AVX2)."""

WIDE_VECTOR = 16
"""fp32 values per vector register where the target has AVX-512."""

ROW_BLOCK = 4
"""Output features whose single-row dot products advance together (register blocking)."""

BLOCK_VALUES = 32
"""Values per quantization block (one set of scales) in every fused format."""


TOKEN_BLOCK = 3
"""Token rows whose dot products advance together in the several-row register block."""

TOKEN_FEATURE_BLOCK = 4
"""Output features whose dot products advance together in that register block."""


@dataclass(frozen=True)
class QuantMatmulShape:
    """The register-level choices of the schedule: fp32 lanes per vector, output features
    per register block of the single-row path, and the token rows x output features of a
    register block of the several-row path."""

    vector: int = VECTOR
    row_block: int = ROW_BLOCK
    token_block: int = TOKEN_BLOCK
    token_feature_block: int = TOKEN_FEATURE_BLOCK


def shape_for(target: Target, packed: bool) -> QuantMatmulShape:
    """AVX-512's vector width where `target` has it, AVX2's otherwise; register blocks of
    ROW_BLOCK features where the weight values are `packed` several to a word (their
    unpacking, not the weight stream, bounds the product), single features otherwise."""
    wide = codegen.target_has_features("avx512f", target)
    return QuantMatmulShape(
        vector=WIDE_VECTOR if wide else VECTOR, row_block=ROW_BLOCK if packed else 1
    )


class CPUQuantNTMatmul(dl.ScheduleRule):
    """Tile-dequantize, rfactor-vectorised schedule of a quantized NT matmul on CPU."""

    def __init__(self, shape: QuantMatmulShape | None = None) -> None:
        """`shape`: fixed register-level choices (default: chosen per target)."""
        self.shape = shape

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool) -> s_tir.Schedule | None:
        matched = match_nt_matmul(func, target)
        if matched is None:
            return None
        sch, infos, info = matched
        if DEQUANTIZE_BLOCK not in [sch.get(block.block_rv).name_hint for block in infos]:
            return None
        if not _whole_feature_blocks(sch, info.block_rv):
            # rfactor drops the bound check of a partial last block from the final sum,
            # which then writes past the output: the plain rule schedules those products.
            return None
        dequantize = sch.get_sblock(DEQUANTIZE_BLOCK)
        shape = self.shape or shape_for(target, _reads_packed_words(sch, dequantize))
        return _schedule(sch, info.block_rv, dequantize, shape)


def _whole_feature_blocks(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> bool:
    """Whether the output features are a known multiple of FEATURE_BLOCK."""
    extent = sch.get(sch.get_loops(block)[-2]).extent
    return isinstance(extent, tirx.IntImm) and int(extent) % FEATURE_BLOCK == 0


def _reads_packed_words(sch: s_tir.Schedule, dequantize: s_tir.schedule.SBlockRV) -> bool:
    """Whether the dequantize stage reads bit fields out of uint32 words (4-bit formats)."""
    return any(str(read.source.dtype) == "uint32" for read in sch.get(dequantize).reads)


def _is_single_row(sch: s_tir.Schedule, row_loops: list[s_tir.schedule.LoopRV]) -> bool:
    """True when the product has exactly one token row, known at compile time."""
    extents = [sch.get(loop).extent for loop in row_loops]
    return all(isinstance(e, tirx.IntImm) and int(e) == 1 for e in extents)


def _pad_token_rows(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, token_block: int) -> None:
    """Pads the token rows to a multiple of `token_block` (zero activations in, the padded
    rows' outputs dropped), so that a register block never straddles the last row: with a
    bound check inside the block, LLVM keeps the partial sums in memory, not in registers."""
    *row_loops, _, _ = sch.get_loops(block)
    extents = [sch.get(loop).extent for loop in row_loops]
    last = max(i for i, e in enumerate(extents) if not (isinstance(e, tirx.IntImm) and int(e) == 1))
    if isinstance(extents[last], tirx.IntImm) and int(extents[last]) % token_block == 0:
        return
    padding = [1] * (len(row_loops) + 2)
    padding[last] = token_block
    sch.pad_einsum(block, padding)


def _schedule(
    sch: s_tir.Schedule,
    block: s_tir.schedule.SBlockRV,
    dequantize: s_tir.schedule.SBlockRV,
    shape: QuantMatmulShape,
) -> s_tir.Schedule:
    *spatial, reduce_loop = sch.get_loops(block)
    single_row = _is_single_row(sch, spatial[:-1])
    if single_row:
        sch.compute_inline(dequantize)
    elif shape.token_block > 1:
        _pad_token_rows(sch, block, shape.token_block)
        *spatial, reduce_loop = sch.get_loops(block)
    features = spatial[-1]
    rows = sch.fuse(*spatial[:-1]) if len(spatial) > 1 else None
    feature_outer, feature_inner = sch.split(features, [None, FEATURE_BLOCK])
    token_blocked = not single_row and shape.token_block * shape.token_feature_block > 1
    # A register block of several rows has independent accumulators enough to hide the FMA
    # latency with one vector per output, which halves the horizontal sums after the loop.
    lanes = shape.vector if token_blocked else LANES
    k_outer, k_lane = sch.split(reduce_loop, [None, lanes])
    order = [feature_outer, feature_inner, k_outer, k_lane]
    if rows is not None:
        order.insert(1, rows)
    sch.reorder(*order)

    # Partial sums over lanes, kept in a small buffer whose last axis is the lane (so that a
    # block of features' lanes are contiguous vectors).
    output_rank = len(sch.get(block).writes[0].region)
    partial = sch.rfactor(k_lane, factor_axis=output_rank)
    final_loops = sch.get_loops(block)
    if single_row and shape.row_block > 1:
        # ROW_BLOCK features' partial sums advance together over k, so that each load of
        # the activations serves ROW_BLOCK weight rows.
        group, _ = sch.split(final_loops[-2], [None, shape.row_block])
        sch.compute_at(partial, group)
        *_, lane, row, k_step = sch.get_loops(partial)
        sch.reorder(k_step, row, lane)
        sch.unroll(row)
    elif token_blocked:
        # token_block rows x token_feature_block features advance together over k: each
        # vector of the dequantized tile loaded serves token_block rows, each activation
        # vector token_feature_block features.
        _, rows, features, _ = final_loops
        row_group, row_in_group = sch.split(rows, [None, shape.token_block])
        group, feature_in_group = sch.split(features, [None, shape.token_feature_block])
        sch.reorder(row_group, group, row_in_group, feature_in_group)
        sch.compute_at(partial, group)
        *_, lane, row, feature, k_step = sch.get_loops(partial)
        sch.reorder(k_step, row, feature, lane)
        sch.unroll(row)
        sch.unroll(feature)
    else:
        sch.compute_at(partial, final_loops[-2])
        *_, lane, k_step = sch.get_loops(partial)
        sch.reorder(k_step, lane)
    # The partial sums keep the default ("global") scope: under TVM's 1 KiB limit, a global
    # buffer on CPU becomes a stack array, which LLVM keeps in registers. A "local" one is a
    # workspace allocation that, in a model's library (where every buffer shares one alias
    # tag), LLVM must assume aliases the activations: it then stores every partial sum after
    # each FMA and reloads its operands (measured 1.35x slower decode GEMVs, 1.7x slower at
    # 5 rows; docs/BENCHMARKS.md, "Several token rows").
    accumulators, vector = sch.split(lane, [lanes // shape.vector, shape.vector])
    sch.vectorize(vector)
    sch.unroll(accumulators)

    if not single_row:
        # The task's rows of the weight, dequantized once into a tile, a block at a time so
        # that a block's scales are loaded once for its BLOCK_VALUES / VECTOR vectors.
        sch.compute_at(dequantize, final_loops[0])
        _, tile_column = sch.get_loops(dequantize)[-2:]
        vectors = BLOCK_VALUES // shape.vector
        _, block_vectors, values = sch.split(tile_column, [None, vectors, shape.vector])
        sch.vectorize(values)
        sch.unroll(block_vectors)

    sch.parallel(final_loops[0])
    sch.decompose_reduction(partial, k_step)
    return sch
