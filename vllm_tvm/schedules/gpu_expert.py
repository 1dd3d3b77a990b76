"""GPU schedules of the expert products (model_defs/moe.py): gather-GEMV and row-grouped tiles.

Why: an expert product reads its weight rows through the routing tensor (row r of the
expert-sorted pairs uses expert `experts[order[r]]`), an indirect index that dlight's GEMV,
Matmul and Reduction rules decline, so its fallback ran one thread per output element with
a serial reduction. Both schedules here reduce each output over the input features with one
warp (32 lanes, each summing a strided share in fp32, then a warp all-reduce), so a weight
row is read once, contiguously, per output row:

- decode (one token per sequence): a block takes one sorted pair and WARPS consecutive
  output features of that pair's expert, so a step reads exactly the chosen experts' rows;
- prefill: a block takes GROUPED_ROWS consecutive sorted pairs. The pairs are sorted by
  expert, so a block's rows nearly always belong to one expert, whose weight slice is
  fetched from memory once and re-read from the cache by the block's other rows: tokens
  grouped by expert share their expert's weights (no shared-memory staging and no tensor
  cores: correctness first, nothing measured yet).

The phase is the product block's EXPERT_PHASE annotation (moe.py sets it from the static
row shape of the step).
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.target import Target

EXPERT_PHASE = "vllm_tvm.expert_phase"
"""The block annotation (key) marking an expert product; its value is DECODE or another phase."""
DECODE = "decode"
LANES = 32
"""Threads reducing one output (a warp)."""
WARPS = 4
"""Output features per block (one per warp)."""
GROUPED_ROWS = 8
"""Sorted pairs per block in prefill."""


class ExpertMatmul(dl.ScheduleRule):
    """Warp-reduced schedule of an expert product; declines every other function."""

    def apply(
        self, func: tirx.PrimFunc, target: Target, tunable: bool
    ) -> s_tir.Schedule | list[s_tir.Schedule] | None:
        if not isinstance(func, tirx.PrimFunc) or target.kind.name == "llvm":
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        reductions = [info for info in infos if info.is_reduction()]
        if len(reductions) != 1:
            return None
        block = reductions[0].block_rv
        phase = sch.get(block).annotations.get(EXPERT_PHASE)
        if phase is None:
            return None
        rows_per_block = 1 if str(phase) == DECODE else GROUPED_ROWS
        position = [info.block_rv for info in infos].index(block)
        for producer in [info.block_rv for info in infos[:position]]:
            sch.compute_inline(producer)
        epilogues = [info.block_rv for info in infos[position + 1 :]]
        _schedule_product(sch, block, epilogues, rows_per_block)
        return sch


def _schedule_product(
    sch: s_tir.Schedule,
    block: s_tir.SBlockRV,
    epilogues: list[s_tir.SBlockRV],
    rows_per_block: int,
) -> None:
    """Block: rows x WARPS features; per row, each warp's lanes share the reduction, then
    all-reduce. The partial sums live per row (one register a lane): the row loop sits
    outside them, so no buffer's size depends on the run-time row count."""
    rows, features, reduce = sch.get_loops(block)
    _, lanes = sch.split(reduce, [None, LANES])
    partial = sch.rfactor(lanes, factor_axis=0)
    rows, features, steps, lanes = sch.get_loops(partial)
    row_block, row = sch.split(rows, [None, rows_per_block])
    feature_block, warp = sch.split(features, [None, WARPS])
    sch.reorder(row_block, feature_block, warp, row, lanes, steps)
    grid = sch.fuse(row_block, feature_block)
    sch.bind(grid, "blockIdx.x")
    sch.bind(warp, "threadIdx.y")
    sch.bind(lanes, "threadIdx.x")
    sch.set_scope(partial, 0, "local")
    sch.decompose_reduction(partial, steps)
    sch.reverse_compute_at(block, row, preserve_unit_loops=True)
    # The lanes' all-reduce must be the innermost loop of the sum (they come first).
    _, _, _, lanes_of_sum, *unit_loops = sch.get_loops(block)
    sch.reorder(*unit_loops, lanes_of_sum)
    sch.bind(lanes_of_sum, "threadIdx.x")
    if epilogues:
        sch.set_scope(block, 0, "local")
    for epilogue in epilogues:
        sch.reverse_compute_at(epilogue, row, preserve_unit_loops=True)
