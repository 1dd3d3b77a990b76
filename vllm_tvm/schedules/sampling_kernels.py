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

The walk over a row and the reductions are in row_kernel_layout.py, the noise in
sampling_noise.py. Both kernels are marked scheduled, so the schedule rules leave them as
written.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script import tirx as T

from vllm_tvm.schedules.row_kernel_layout import UNROLL, RowLayout, better
from vllm_tvm.schedules.sampling_noise import (
    DRAW_STEP,
    GOLDEN,
    LOW32,
    NOISE_MAX,
    NOISE_MIN,
    gumbel,
    mix32,
)

BISECTION_STEPS = 31
"""Bisection over [-1, 0x7F800000] (the magnitude patterns of 0 .. inf) ends in 31 halvings."""
MAX_DRAWS = 64
"""Draws before a top_k / top_p row gives up and takes its argmax (see the module docstring)."""

_INF_BITS = 0x7F800000
_MAGNITUDE = 0x7FFFFFFF


def _magnitude(value: Any) -> Any:
    """The bit pattern of |value| as int32 (ordered like |value| for non-NaN floats)."""
    return T.bitwise_and(T.reinterpret("int32", value), T.int32(_MAGNITUDE))


def row_argmax(vocab: int, gpu: bool) -> tirx.PrimFunc:
    """`(logits [rows, vocab] f32) -> [rows] int32`: the first maximal index of each row."""
    layout = RowLayout(vocab, gpu)
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
    layout = RowLayout(vocab, gpu)
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
                                + T.Cast("uint64", draw) * T.uint64(DRAW_STEP)
                            ) & T.uint64(LOW32)
                            key_mix[0] = draw_key[0]
                            mix32(key_mix)
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
                                                T.Cast("uint64", j) * T.uint64(GOLDEN)
                                                & T.uint64(LOW32)
                                            ) ^ key_mix[0]
                                            mix32(word)
                                            word[0] = (word[0] + draw_key[0]) & T.uint64(LOW32)
                                            mix32(word)
                                            score[0] = s + gumbel(T.Cast("uint32", word[0]))
                                            if better(score[0], j, best[0], best_index[0]):
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
