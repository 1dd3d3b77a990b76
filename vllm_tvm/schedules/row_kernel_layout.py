"""How a per-row kernel over `[rows, vocab]` fp32 logits walks a row, and its reductions.

Why apart: the argmax and the sampling kernel (sampling_kernels.py) share the walk, the
coalesced loads and the block-wide reductions; only what they compute per element differs.

Layout: on GPUs one thread block per row, `GPU_THREADS` threads striding over the vocabulary
(coalesced loads, `UNROLL` of them in flight per thread before any is used: one load at a
time leaves a pass waiting on memory latency), block-wide reductions through
`tvm_thread_allreduce` (warp shuffles and shared memory). On CPUs one loop per row, rows in
parallel.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script import tirx as T

GPU_THREADS = 1024
UNROLL = 8


def better(value: Any, index: Any, other_value: Any, other_index: Any) -> Any:
    """Whether (value, index) wins an argmax against the other pair (ties: lower index)."""
    return tirx.Or(value > other_value, tirx.And(value == other_value, index < other_index))


class RowLayout:
    """How one kernel walks a row: threads per row, the row and thread loops, the passes.

    A pass visits element `j = (outer * UNROLL + u) * threads + tx` for `outer` in
    `range(outers)`, `u` in `range(UNROLL)`; `load` first reads the UNROLL values of one
    `outer` (0 past the vocabulary), then the caller's body handles them in a serial `u`
    loop (nvcc unrolls it and keeps the values in registers; TVM's own unrolling of those
    bodies is not needed).
    """

    def __init__(self, vocab: int, gpu: bool) -> None:
        self.vocab = vocab
        self.gpu = gpu
        self.threads = GPU_THREADS if gpu else 1
        self.outers = -(-vocab // (self.threads * UNROLL))

    def row_loop(self, rows: Any) -> Any:
        return T.thread_binding(rows, thread="blockIdx.x") if self.gpu else T.parallel(rows)

    def thread_loop(self) -> Any:
        return T.thread_binding(self.threads, thread="threadIdx.x") if self.gpu else T.serial(1)

    def index(self, outer: Any, u: Any, tx: Any) -> Any:
        return T.Cast("int32", (outer * UNROLL + u) * self.threads + tx)

    def macros(self) -> tuple[Any, Any, Any, Any]:
        """(load, all_reduce, all_reduce_argmax, argmax_pass) macros for this layout.

        On a CPU a row has one "thread", so a reduction is a copy. On a GPU each call site
        needs its own result buffer: TVM 0.27's all-reduce lowering loses the shared staging
        buffer of the second of two all-reduces that write the same buffer ("red_result ...
        not passed in as API arguments").
        """
        vocab, gpu, index, outers = self.vocab, self.gpu, self.index, self.outers

        @T.macro
        def load(logits, row, outer, tx, values):
            for u in T.unroll(UNROLL):
                j: T.let[T.int32] = index(outer, u, tx)
                values[u] = T.if_then_else(j < vocab, logits[row, j], T.float32(0))

        @T.macro
        def all_reduce(tx, combine, identity, value, result):
            if gpu:
                with T.sblock("all_reduce"):
                    T.reads(value[0])
                    T.writes(result[0])
                    T.attr(
                        T.comm_reducer(combine, [identity]),
                        "reduce_scope",
                        T.reinterpret("handle", T.uint64(0)),
                    )
                    T.tvm_thread_allreduce(T.uint32(1), value[0], True, result[0], tx, dtype="void")
            else:
                result[0] = value[0]

        # The lowered all-reduce updates its values one after another, so the index goes
        # first (computed from the old values) and the value is a max that does not read it.
        @T.macro
        def all_reduce_argmax(tx, index, value, result_index, result_value):
            if gpu:
                with T.sblock("all_reduce_argmax"):
                    T.reads(index[0], value[0])
                    T.writes(result_index[0], result_value[0])
                    T.attr(
                        T.comm_reducer(
                            lambda i0, v0, i1, v1: (
                                T.Select(better(v0, i0, v1, i1), i0, i1),
                                T.max(v0, v1),
                            ),
                            [T.int32(0), T.float32("-inf")],
                        ),
                        "reduce_scope",
                        T.reinterpret("handle", T.uint64(0)),
                    )
                    T.tvm_thread_allreduce(
                        T.uint32(2),
                        index[0],
                        value[0],
                        True,
                        result_index[0],
                        result_value[0],
                        tx,
                        dtype="void",
                    )
            else:
                result_index[0] = index[0]
                result_value[0] = value[0]

        # One pass over a row: its first maximal logit and index, in every thread's
        # result_index/result_value (best/best_index are the thread's partials).
        @T.macro
        def argmax_pass(logits, row, tx, values, best, best_index, result_index, result_value):
            best[0] = T.float32("-inf")
            best_index[0] = T.int32(0)
            for outer in T.serial(outers):
                load(logits, row, outer, tx, values)
                for u in T.serial(UNROLL):
                    j: T.let[T.int32] = index(outer, u, tx)
                    if j < vocab:
                        if better(values[u], j, best[0], best_index[0]):
                            best[0] = values[u]
                            best_index[0] = j
            all_reduce_argmax(tx, best_index, best, result_index, result_value)

        return load, all_reduce, all_reduce_argmax, argmax_pass
