"""CPU schedule for the fp32-accumulating NT matmul that `NTLinear` emits.

Unscheduled, LLVM runs the product as one scalar loop nest on one core (measured 0.7 s per
decode step of a 0.5B model on 2 cores). This rule parallelises over output features in
blocks, keeps the token rows of a block together so each weight row is read once per block
(prefill reuses it across tokens), and leaves the contiguous k loop innermost so LLVM
vectorises the dot product (the target enables fp reassociation for that).
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import SBlockInfo, normalize_prim_func
from tvm.target import Target

FEATURE_BLOCK = 16
"""Output features per parallel task: enough work per task, few tasks per step."""


def match_nt_matmul(
    func: tirx.PrimFunc, target: Target
) -> tuple[s_tir.Schedule, list[SBlockInfo], SBlockInfo] | None:
    """For an llvm function whose only reduction is an `nt_matmul` over its last iterator:
    a fresh schedule, its normalised block infos and that reduction; None otherwise.

    Shared by the plain and the quantized CPU matmul rules, which differ only after it."""
    if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
        return None
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    reductions = [info for info in infos if info.is_reduction()]
    if len(reductions) != 1 or "nt_matmul" not in sch.get(reductions[0].block_rv).name_hint:
        return None
    kinds = [it.kind for it in reductions[0].iters]
    if len(kinds) < 2 or kinds[-1] != "R" or "R" in kinds[:-1]:
        return None
    return sch, infos, reductions[0]


class CPUNTMatmul(dl.ScheduleRule):
    """Parallel, cache-blocked schedule of a reduction over the last axis of both inputs."""

    def apply(self, func: tirx.PrimFunc, target: Target, tunable: bool) -> s_tir.Schedule | None:
        matched = match_nt_matmul(func, target)
        if matched is None:
            return None
        sch, _, info = matched
        block = info.block_rv
        *spatial, reduce_loop = sch.get_loops(block)
        if len(spatial) != len(info.iters) - 1:
            return None
        features = spatial[-1]
        rows = None
        if len(spatial) > 2:
            rows = sch.fuse(*spatial[:-1])
        elif len(spatial) == 2:
            rows = spatial[0]
        feature_outer, feature_inner = sch.split(features, [None, FEATURE_BLOCK])
        if rows is None:
            sch.reorder(feature_outer, feature_inner, reduce_loop)
        else:
            sch.reorder(feature_outer, rows, feature_inner, reduce_loop)
        sch.parallel(feature_outer)
        for consumer in sch.get_consumers(block):
            try:
                sch.reverse_compute_inline(consumer)
            except s_tir.ScheduleError:
                pass
        return sch
