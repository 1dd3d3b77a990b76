"""Per-row argmax and sampling kernels over fp32 logits that stay where the forward left them.

Why this exists: without them every step copies the whole `[rows, vocab]` fp32 logits to the
host (33 MB at batch 64 with a 128,256-token vocabulary) and scans them in numpy. These
kernels reduce each row on the device and hand back one int32 token per row.

`row_argmax` is numpy.argmax per row (the first maximal index). `row_sample` applies what
vLLM applies to a randomly sampled row, in its order (temperature, min_p, top_k, top_p), then
draws one token by the exponential race, which vLLM's own sampler also uses: the winner of
argmax(logit / temperature + Gumbel noise) over the kept tokens is distributed as the
softmax of the kept logits. The noise of element j is a hash of (row key, j), so a row key
drawn on the host from a request's own generator makes the draw reproducible. Rows with
temperature <= 0 take the plain argmax.

Filters without sorting: with the row maximum m subtracted every scaled logit
s = (l - m) / t is <= 0, and "s >= threshold" is "the bit pattern of |s| <= the bit pattern
of |threshold|" (IEEE-754 orders non-negative floats like their bits), so a kept set is
"|s| bits <= M". min_p gives M directly. top_k and top_p are applied by rejection: draw x
from the tokens kept so far, accept it if fewer than k tokens / less than top_p of the kept
mass lie strictly above it (then x is in the top_k / top_p set), otherwise drop x and every
token below it and draw again with fresh noise. Every draw follows the softmax of a superset
of the final set, so the accepted token follows the softmax of that set; about 1.1 draws
are needed at top_p = 0.9, a dozen in the worst case measured (flat row, top_p -> 0); after
`MAX_DRAWS` the row takes its argmax, which is always in the set. A row with top_k and
top_p first finds the k-th largest s by bisection over M (31 counting passes), because
top_p is measured against the mass of the top k. Passes over the row: greedy 1, plain
temperature 2, top_p ~4.

Layout: on GPUs one thread block per row, `GPU_THREADS` threads striding over the vocabulary
(coalesced loads, `UNROLL` of them in flight per thread before any is used: one load at a
time leaves a pass waiting on memory latency), block-wide reductions through
`tvm_thread_allreduce` (warp shuffles and shared memory). On CPUs one loop per row, rows in
parallel. Both are marked scheduled, so the schedule rules leave them as written.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script import tirx as T

GPU_THREADS = 1024
UNROLL = 8
BISECTION_STEPS = 31
"""Bisection over [-1, 0x7F800000] (the magnitude patterns of 0 .. inf) ends in 31 halvings."""
MAX_DRAWS = 64
"""Draws before a top_k / top_p row gives up and takes its argmax (see the module docstring)."""
NOISE_MIN, NOISE_MAX = -3.2, 23.0
"""Bounds of `_gumbel` over all words (-3.13 and 22.87, rounded outwards)."""

_INF_BITS = 0x7F800000
_MAGNITUDE = 0x7FFFFFFF
_LOW32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
_DRAW_STEP = 0x632BE5AB


@T.macro
def _mix32(h):
    """Mix the 32-bit value in uint64 local buffer `h` in place: a bijective integer hash
    with the "lowbias32" constants of Chris Wellons' hash search.

    32-bit arithmetic carried in 64 bits and masked: TVM's LLVM backend marks uint32
    multiplies "no unsigned wrap", so a wrapping uint32 hash is undefined behaviour there
    (seen: LLVM dropped unrolled hash code). Statements, not one expression, because TVM
    inlines Let expressions and the nested hash would grow eightfold per step.
    """
    h[0] = h[0] ^ (h[0] >> T.uint64(16))
    h[0] = (h[0] * T.uint64(0x7FEB352D)) & T.uint64(_LOW32)
    h[0] = h[0] ^ (h[0] >> T.uint64(15))
    h[0] = (h[0] * T.uint64(0x846CA68B)) & T.uint64(_LOW32)
    h[0] = h[0] ^ (h[0] >> T.uint64(16))


def _gumbel(word: Any) -> Any:
    """Gumbel noise -log(-log(u)) in float32 for u = (word + 0.5) / 2**32 in (0, 1).

    -log(u) is computed from the nearer end of (0, 1): log(u) below one half, log1p(-(1 - u))
    above, so it keeps full relative precision everywhere (u never rounds to 1, which would
    make the noise infinite); the noise is bounded by 22.9, reached at u = 1 - 2**-33.
    """
    low_half = word < T.uint32(0x80000000)
    nearer = T.if_then_else(low_half, word, ~word)
    distance = (T.Cast("float32", nearer) + T.float32(0.5)) * T.float32(2.0**-32)
    exponential = T.if_then_else(low_half, -T.log(distance), -T.log1p(-distance))
    return -T.log(exponential)


def _magnitude(value: Any) -> Any:
    """The bit pattern of |value| as int32 (ordered like |value| for non-NaN floats)."""
    return T.bitwise_and(T.reinterpret("int32", value), T.int32(_MAGNITUDE))


def _better(value: Any, index: Any, other_value: Any, other_index: Any) -> Any:
    """Whether (value, index) wins an argmax against the other pair (ties: lower index)."""
    return tirx.Or(value > other_value, tirx.And(value == other_value, index < other_index))


class _Layout:
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
                                T.Select(_better(v0, i0, v1, i1), i0, i1),
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
                        if _better(values[u], j, best[0], best_index[0]):
                            best[0] = values[u]
                            best_index[0] = j
            all_reduce_argmax(tx, best_index, best, result_index, result_value)

        return load, all_reduce, all_reduce_argmax, argmax_pass


def row_argmax(vocab: int, gpu: bool) -> tirx.PrimFunc:
    """`(logits [rows, vocab] f32) -> [rows] int32`: the first maximal index of each row."""
    layout = _Layout(vocab, gpu)
    _, _, _, argmax_pass = layout.macros()

    @T.prim_func(private=True, s_tir=True)
    def argmax(var_logits: T.handle, var_out: T.handle) -> None:
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        rows = T.int64()
        logits = T.match_buffer(var_logits, (rows, vocab), "float32")
        out = T.match_buffer(var_out, (rows,), "int32")
        for row in layout.row_loop(rows):
            for tx in layout.thread_loop():
                with T.sblock("argmax_row"):
                    values = T.sblock_alloc_buffer((UNROLL,), "float32", scope="local")
                    best = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    best_index = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    winner = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    winner_index = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    argmax_pass(logits, row, tx, values, best, best_index, winner_index, winner)
                    if tx == 0:
                        out[row] = winner_index[0]

    return argmax


def row_sample(vocab: int, gpu: bool) -> tirx.PrimFunc:
    """One token per row under per-row sampling parameters (see the module docstring).

    `(logits [rows, vocab] f32, temperature [rows] f32, top_k [rows] i32, top_p [rows] f32,
    min_p [rows] f32, keys [rows] u32) -> [rows] int32`. temperature <= 0: argmax;
    top_k <= 0 or >= vocab, top_p >= 1, min_p <= 0: that filter is off.
    """
    layout = _Layout(vocab, gpu)
    load, all_reduce, all_reduce_argmax, argmax_pass = layout.macros()
    outers, index = layout.outers, layout.index

    def add(a: Any, b: Any) -> Any:
        return a + b

    @T.prim_func(private=True, s_tir=True)
    def sample(
        var_logits: T.handle,
        var_temperature: T.handle,
        var_top_k: T.handle,
        var_top_p: T.handle,
        var_min_p: T.handle,
        var_keys: T.handle,
        var_out: T.handle,
    ) -> None:
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        rows = T.int64()
        logits = T.match_buffer(var_logits, (rows, vocab), "float32")
        temperature = T.match_buffer(var_temperature, (rows,), "float32")
        top_k = T.match_buffer(var_top_k, (rows,), "int32")
        top_p = T.match_buffer(var_top_p, (rows,), "float32")
        min_p = T.match_buffer(var_min_p, (rows,), "float32")
        keys = T.match_buffer(var_keys, (rows,), "uint32")
        out = T.match_buffer(var_out, (rows,), "int32")
        for row in layout.row_loop(rows):
            for tx in layout.thread_loop():
                with T.sblock("sample_row"):
                    values = T.sblock_alloc_buffer((UNROLL,), "float32", scope="local")
                    best = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    best_index = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    top = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    top_index = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    shift = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    part = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    total = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    mass = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    count = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    counted = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    above = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    lo = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    hi = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    limit = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    cutoff = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    rank_limit = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    target = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    chosen = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    done = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    draw_key = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    key_mix = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    word = T.sblock_alloc_buffer((1,), "uint64", scope="local")
                    score = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    winner = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    winner_index = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    t: T.let[T.float32] = temperature[row]
                    k: T.let[T.int32] = top_k[row]
                    inverse_t: T.let[T.float32] = T.float32(1) / t
                    drawn: T.let[T.bool] = t > T.float32(0)
                    uses_top_k: T.let[T.bool] = tirx.And(k > 0, k < vocab)
                    uses_top_p: T.let[T.bool] = top_p[row] < T.float32(1)
                    # Pass 1: the argmax, the greedy token and the row maximum m (scaled
                    # logits s = (l - m) / t are then all <= 0).
                    # Written twice so TVM keeps it a register instead of re-reading the
                    # reduction's shared-memory result in every later pass.
                    shift[0] = T.float32(0)
                    argmax_pass(logits, row, tx, values, best, best_index, top_index, top)
                    shift[0] = top[0]
                    chosen[0] = top_index[0]
                    # min_p keeps |s| <= |log(min_p)|.
                    limit[0] = T.int32(_INF_BITS)
                    if min_p[row] > T.float32(0):
                        limit[0] = _magnitude(T.log(min_p[row]))
                    # top_k with top_p: top_p needs the mass of the top k, so find the k-th
                    # largest s, the smallest magnitude M with count(|s| <= M) >= k.
                    rank_limit[0] = T.int32(vocab)
                    if T.tvm_thread_invariant(tirx.And(drawn, uses_top_k)):
                        rank_limit[0] = k
                    if T.tvm_thread_invariant(tirx.And(drawn, tirx.And(uses_top_k, uses_top_p))):
                        lo[0] = T.int32(-1)
                        hi[0] = T.int32(_INF_BITS)
                        for _step in T.serial(BISECTION_STEPS):
                            mid: T.let[T.int32] = lo[0] + T.floordiv(hi[0] - lo[0], 2)
                            count[0] = T.int32(0)
                            for outer in T.serial(outers):
                                load(logits, row, outer, tx, values)
                                for u in T.serial(UNROLL):
                                    if index(outer, u, tx) < vocab:
                                        s: T.let[T.float32] = (values[u] - shift[0]) * inverse_t
                                        if _magnitude(s) <= mid:
                                            count[0] += 1
                            all_reduce(tx, add, T.int32(0), count, counted)
                            if counted[0] >= k:
                                hi[0] = mid
                            else:
                                lo[0] = mid
                        limit[0] = T.min(limit[0], hi[0])
                        rank_limit[0] = T.int32(vocab)
                    # top_p's bar: top_p times the mass of what min_p and top_k keep.
                    target[0] = T.float32("inf")
                    if T.tvm_thread_invariant(tirx.And(drawn, uses_top_p)):
                        part[0] = T.float32(0)
                        for outer in T.serial(outers):
                            load(logits, row, outer, tx, values)
                            for u in T.serial(UNROLL):
                                if index(outer, u, tx) < vocab:
                                    s: T.let[T.float32] = (values[u] - shift[0]) * inverse_t
                                    if _magnitude(s) <= limit[0]:
                                        part[0] += T.exp(s)
                        all_reduce(tx, add, T.float32(0), part, total)
                        target[0] = top_p[row] * total[0]
                    # Draw rounds: draw x from the tokens with |s| <= cutoff; keep it when
                    # fewer than rank_limit tokens and less than `target` mass lie above it
                    # (x is then in the top_k / top_p set), else drop x and everything below
                    # it and draw again with fresh noise. Each draw follows the softmax of a
                    # superset of the kept set, so an accepted x follows the kept set's.
                    cutoff[0] = limit[0]
                    done[0] = T.Select(drawn, T.int32(0), T.int32(1))
                    for draw in T.serial(MAX_DRAWS):
                        if T.tvm_thread_invariant(done[0] == 0):
                            draw_key[0] = (
                                T.Cast("uint64", keys[row])
                                + T.Cast("uint64", draw) * T.uint64(_DRAW_STEP)
                            ) & T.uint64(_LOW32)
                            key_mix[0] = draw_key[0]
                            _mix32(key_mix)
                            best[0] = T.float32("-inf")
                            best_index[0] = T.int32(0)
                            for outer in T.serial(outers):
                                load(logits, row, outer, tx, values)
                                for u in T.serial(UNROLL):
                                    j: T.let[T.int32] = index(outer, u, tx)
                                    if j < vocab:
                                        s: T.let[T.float32] = (values[u] - shift[0]) * inverse_t
                                        # Hash only where the score can still win: the
                                        # noise lies in [NOISE_MIN, NOISE_MAX] and the top
                                        # token (s = 0) scores at least NOISE_MIN.
                                        if tirx.And(
                                            _magnitude(s) <= cutoff[0],
                                            s + T.float32(NOISE_MAX)
                                            >= T.max(best[0], T.float32(NOISE_MIN)),
                                        ):
                                            # Element j's word: mix(mix(j * golden ^ mix(key))
                                            # + key), key being this draw's.
                                            word[0] = (
                                                T.Cast("uint64", j) * T.uint64(_GOLDEN)
                                                & T.uint64(_LOW32)
                                            ) ^ key_mix[0]
                                            _mix32(word)
                                            word[0] = (word[0] + draw_key[0]) & T.uint64(_LOW32)
                                            _mix32(word)
                                            score[0] = s + _gumbel(T.Cast("uint32", word[0]))
                                            if _better(score[0], j, best[0], best_index[0]):
                                                best[0] = score[0]
                                                best_index[0] = j
                            all_reduce_argmax(tx, best_index, best, winner_index, winner)
                            x: T.let[T.int32] = winner_index[0]
                            drawn_bits: T.let[T.int32] = _magnitude(
                                (logits[row, x] - shift[0]) * inverse_t
                            )
                            if T.tvm_thread_invariant(tirx.Or(uses_top_p, uses_top_k)):
                                # Count and mass of the tokens above x (|s| < |s_x|).
                                count[0] = T.int32(0)
                                part[0] = T.float32(0)
                                for outer in T.serial(outers):
                                    load(logits, row, outer, tx, values)
                                    for u in T.serial(UNROLL):
                                        if index(outer, u, tx) < vocab:
                                            s: T.let[T.float32] = (values[u] - shift[0]) * inverse_t
                                            if _magnitude(s) < drawn_bits:
                                                count[0] += 1
                                                part[0] += T.exp(s)
                                all_reduce(tx, add, T.int32(0), count, above)
                                all_reduce(tx, add, T.float32(0), part, mass)
                                if tirx.And(above[0] < rank_limit[0], mass[0] < target[0]):
                                    chosen[0] = x
                                    done[0] = 1
                                else:
                                    cutoff[0] = drawn_bits - 1
                            else:
                                chosen[0] = x
                                done[0] = 1
                    if tx == 0:
                        out[row] = chosen[0]

    return sample
