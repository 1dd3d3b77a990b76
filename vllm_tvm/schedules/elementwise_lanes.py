"""Which innermost-axis runs of an elementwise kernel may become vector accesses.

Why: the GPU rule (gpu_elementwise.py) and the CPU rule (cpu_elementwise.py) both turn the
innermost loop of an injective kernel into one vector access per buffer. That is only exact
where every access either moves contiguously with the innermost axis or not at all; this
module proves it (or declines) for both, each with its own vector width.
"""

from __future__ import annotations

import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.sym.analyzer import Analyzer

Access = tuple[ir.Var, list[ir.Expr]]
"""A buffer (TVM 0.27: a variable of buffer type) and the indices it is read or written at."""


def _accesses(store: tirx.BufferStore) -> list[Access]:
    """Every buffer access of a block body that is one store: the store and its loads."""
    found: list[Access] = [(store.buffer, list(store.indices))]
    tvm_ffi.structural_walk(
        store.value, [(ir.TensorLoad, lambda load: found.append((load.source, list(load.indices))))]
    )
    return found


def _uses(expr: ir.Expr, var: ir.Var) -> bool:
    used: list[bool] = []
    tvm_ffi.structural_walk(expr, [(ir.Var, lambda v: used.append(v.same_as(var)))])
    return any(used)


def vector_lanes(block: s_tir.SBlock, vector_bytes: int) -> int | None:
    """How many consecutive innermost elements (`vector_bytes` of the widest dtype) one
    vector access may take, or None to decline.

    Accesses that do not move with the innermost axis (an index table, a per-row scale) are
    read once per vector as before; every access that does must be a contiguous run."""
    if not isinstance(block.body, tirx.BufferStore) or not block.iter_vars:
        return None
    innermost = block.iter_vars[-1]
    extent = innermost.dom.extent
    analyzer = Analyzer()
    runs: list[tuple[ir.Var, int]] = []
    for buffer, indices in _accesses(block.body):
        if any(_uses(index, innermost.var) for index in indices[:-1]):
            return None
        if not indices or not _uses(indices[-1], innermost.var):
            continue
        offset = analyzer.simplify(indices[-1] - innermost.var)
        if not isinstance(offset, tirx.IntImm):
            return None
        runs.append((buffer, int(offset.value)))
    store = block.body.buffer
    if not runs or not runs[0][0].same_as(store) or not isinstance(extent, tirx.IntImm):
        return None  # the output itself must be written along the innermost axis
    lanes = vector_bytes // (max(buffer.dtype.bits for buffer, _ in runs) // 8)
    if lanes < 2 or int(extent.value) % lanes:
        return None
    if all(_dense_and_aligned(buffer, lanes) and offset % lanes == 0 for buffer, offset in runs):
        return lanes
    return None


def _dense_and_aligned(buffer: ir.Var, lanes: int) -> bool:
    """No strides, no element offset, a static innermost extent that keeps rows aligned."""
    if list(buffer.strides):
        return False
    offset = buffer.elem_offset
    if not (isinstance(offset, tirx.IntImm) and int(offset.value) == 0):
        return False
    if not buffer.shape:
        return True
    last = buffer.shape[-1]
    return isinstance(last, tirx.IntImm) and int(last.value) % lanes == 0


def bound_one_to_one(
    sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, loops: list[s_tir.schedule.LoopRV]
) -> bool:
    """Whether the block's i-th axis is exactly its i-th loop, so the innermost loop walks the
    innermost axis (what `vector_lanes` proved safe)."""
    loop_vars = [sch.get(loop).loop_var for loop in loops]
    target_block = sch.get(block)
    realizes: list[s_tir.SBlockRealize] = []

    def keep_if_ours(node: s_tir.SBlockRealize) -> None:
        if node.block.same_as(target_block):
            realizes.append(node)

    tvm_ffi.structural_walk(sch.mod["main"].body, [(s_tir.SBlockRealize, keep_if_ours)])
    if len(realizes) != 1 or len(realizes[0].iter_values) != len(loop_vars):
        return False
    bindings = zip(realizes[0].iter_values, loop_vars, strict=True)
    return all(value.same_as(var) for value, var in bindings)


def vectorisable_loops(
    sch: s_tir.Schedule, vector_bytes: int
) -> tuple[list[s_tir.schedule.LoopRV], int] | None:
    """The loops of `sch`'s kernel, once inlined into one injective block bound one to one,
    and how many of its innermost elements make one `vector_bytes` access; None when the
    kernel is not such a block or `vector_lanes` declines it."""
    block_infos = normalize_prim_func(sch)
    if block_infos is None:
        return None
    block_infos = dl.base.try_inline(sch, block_infos)
    if len(block_infos) != 1 or not block_infos[0].is_injective():
        return None
    block = block_infos[0].block_rv
    lanes = vector_lanes(sch.get(block), vector_bytes)
    loops = sch.get_loops(block)
    if lanes is None or not bound_one_to_one(sch, block, loops):
        return None
    return loops, lanes
