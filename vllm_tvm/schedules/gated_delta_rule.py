"""The gated delta rule of Gated DeltaNet layers (Qwen3-Next, Qwen3.5/3.6): TIR kernels.

What they compute, per value head h (its query/key head `h // (heads_v // heads_k)`), per
token t, with the recurrent state S [k_dim, v_dim] (fp32):

    S <- exp(g_t) * S
    S <- S + k_t (beta_t * (v_t - S^T k_t))^T        (the delta rule)
    o_t = S^T q_t

q and k arrive L2-normalised, q already scaled by k_dim^-0.5 (the layer does both:
model_defs/gated_delta_net.py), g_t <= 0 is the log decay, beta_t in (0, 1).

`delta_rule_step` is that recurrence for one token per sequence (decode). `delta_rule_chunked`
is the same maths for ragged prefill, 64 tokens a chunk (the chunked / UT form of
transformers' `torch_chunk_gated_delta_rule`): within a chunk, with G_t the cumulative log
decay from the chunk start and S the state entering the chunk,

    A[t, s] = beta_t (k_t . k_s) exp(G_t - G_s)      (s < t)
    P[t, s] = (q_t . k_s) exp(G_t - G_s)             (s <= t)
    u_t = beta_t (v_t - exp(G_t) S^T k_t) - sum_{s<t} A[t, s] u_s   (forward substitution:
          the unit lower-triangular UT system (I + A) u = rhs, solved row by row)
    o_t = exp(G_t) S^T q_t + sum_{s<=t} P[t, s] u_s
    S  <- exp(G_last) S + sum_t exp(G_last - G_t) k_t u_t^T

transformers solves the UT system for beta v and beta exp(G) k separately and combines them
after; solving it once for the combined right-hand side is the same linear algebra with one
solve instead of two. A chunk shorter than 64 (a sequence's tail) is the same formulas over
its own rows: transformers' zero padding adds nothing to them.

Layout (recurrent_layout.py): a task per (sequence, value head) runs that sequence's chunks
in order; each thread owns value columns, its slice of S in registers (GPU) or a per-task
buffer (CPU); A and P (64 x 64) are computed by all threads together into shared scratch.

States: a pool [slots, heads_v, k_dim, v_dim] fp32, sequence b's at `slots[b]` (distinct
slots in one call), read once and written once by the task that owns it, in place, so a
step moves no state it does not update (a Qwen3.6-27B sequence holds 3 MiB of it per
layer). A pool of the batch's size with slots 0 .. batch - 1 is the plain "states in,
states out" form.
"""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as T

from vllm_tvm.schedules.recurrent_layout import ColumnLayout

CHUNK = 64
"""Tokens per chunk of the prefill scan."""


def delta_rule_chunked(
    heads_k: int, heads_v: int, k_dim: int, v_dim: int, gpu: bool
) -> tirx.PrimFunc:
    """`(q [n, heads_k, k_dim], k [n, heads_k, k_dim], v [n, heads_v, v_dim], g [n, heads_v],
    beta [n, heads_v], seq_starts [batch + 1] i32, slots [batch] i32,
    states [pool, heads_v, k_dim, v_dim]) -> out [n, heads_v, v_dim]`, fp32 but the indices:
    the ragged tokens of `batch` sequences, sequence b at rows seq_starts[b] ..
    seq_starts[b+1] with its state at states[slots[b]], updated in place."""
    group = heads_v // heads_k
    layout = ColumnLayout(v_dim, gpu)
    per_thread = layout.columns_per_thread
    pair_rounds = -(-(CHUNK * CHUNK) // layout.threads)
    scope = layout.shared_scope

    @T.prim_func(private=True, s_tir=True)
    def chunked(
        var_q: T.handle,
        var_k: T.handle,
        var_v: T.handle,
        var_g: T.handle,
        var_beta: T.handle,
        var_seq_starts: T.handle,
        var_slots: T.handle,
        var_states: T.handle,
        var_out: T.handle,
    ) -> None:
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        tokens = T.int64()
        batch = T.int64()
        pool = T.int64()
        q = T.match_buffer(var_q, (tokens, heads_k, k_dim), "float32")
        k = T.match_buffer(var_k, (tokens, heads_k, k_dim), "float32")
        v = T.match_buffer(var_v, (tokens, heads_v, v_dim), "float32")
        g = T.match_buffer(var_g, (tokens, heads_v), "float32")
        beta = T.match_buffer(var_beta, (tokens, heads_v), "float32")
        seq_starts = T.match_buffer(var_seq_starts, (batch + 1,), "int32")
        slots = T.match_buffer(var_slots, (batch,), "int32")
        states = T.match_buffer(var_states, (pool, heads_v, k_dim, v_dim), "float32")
        out = T.match_buffer(var_out, (tokens, heads_v, v_dim), "float32")
        for task in layout.task_loop(batch * heads_v):
            seq: T.let[T.int64] = task // heads_v
            slot: T.let[T.int64] = T.Cast("int64", slots[seq])
            head: T.let[T.int64] = task % heads_v
            head_k: T.let[T.int64] = head // group
            first: T.let[T.int64] = T.Cast("int64", seq_starts[seq])
            length: T.let[T.int64] = T.Cast("int64", seq_starts[seq + 1]) - first
            with T.sblock("chunk_scan"):
                T.reads()
                T.writes()
                a_mat = T.sblock_alloc_buffer((CHUNK, CHUNK), "float32", scope=scope)
                p_mat = T.sblock_alloc_buffer((CHUNK, CHUNK), "float32", scope=scope)
                cum = T.sblock_alloc_buffer((CHUNK,), "float32", scope="local")
                decay_in = T.sblock_alloc_buffer((CHUNK,), "float32", scope="local")
                decay_out = T.sblock_alloc_buffer((CHUNK,), "float32", scope="local")
                s_loc = T.sblock_alloc_buffer((k_dim, per_thread), "float32", scope="local")
                u_loc = T.sblock_alloc_buffer((CHUNK, per_thread), "float32", scope="local")
                acc = T.sblock_alloc_buffer((per_thread,), "float32", scope="local")
                dots = T.sblock_alloc_buffer((2,), "float32", scope="local")
                for tx in layout.thread_loop():
                    for i in T.serial(k_dim):
                        for jj in layout.column_loop():
                            s_loc[i, jj] = states[slot, head, i, layout.column(tx, jj)]
                for chunk in T.serial((length + CHUNK - 1) // CHUNK):
                    start: T.let[T.int64] = first + chunk * CHUNK
                    rows: T.let[T.int64] = T.min(length - chunk * CHUNK, CHUNK)
                    # Every thread: the chunk's cumulative log decay and its exps; then
                    # A and P over the chunk's (t, s) pairs, shared by all threads.
                    for tx in layout.thread_loop():
                        cum[0] = g[start, head]
                        for t in T.serial(rows - 1):
                            cum[t + 1] = cum[t] + g[start + t + 1, head]
                        for t in T.serial(rows):
                            decay_in[t] = T.exp(cum[t])
                            decay_out[t] = T.exp(cum[rows - 1] - cum[t])
                        for rnd in T.serial(pair_rounds):
                            pair: T.let[T.int64] = T.Cast("int64", rnd * layout.threads + tx)
                            t: T.let[T.int64] = pair // CHUNK
                            s: T.let[T.int64] = pair % CHUNK
                            if t < rows and s <= t:
                                dots[0] = T.float32(0)
                                dots[1] = T.float32(0)
                                for i in T.serial(k_dim):
                                    dots[0] = (
                                        dots[0] + k[start + t, head_k, i] * k[start + s, head_k, i]
                                    )
                                    dots[1] = (
                                        dots[1] + q[start + t, head_k, i] * k[start + s, head_k, i]
                                    )
                                rel: T.let[T.float32] = T.exp(cum[t] - cum[s])
                                a_mat[t, s] = T.if_then_else(
                                    s < t, beta[start + t, head] * dots[0] * rel, T.float32(0)
                                )
                                p_mat[t, s] = dots[1] * rel
                    # Each thread's columns: corrected values, outputs, state update.
                    for tx in layout.thread_loop():
                        for t in T.serial(rows):
                            for jj in layout.column_loop():
                                acc[jj] = T.float32(0)
                            for i in T.serial(k_dim):
                                for jj in layout.column_loop():
                                    acc[jj] = acc[jj] + k[start + t, head_k, i] * s_loc[i, jj]
                            for jj in layout.column_loop():
                                u_loc[t, jj] = beta[start + t, head] * (
                                    v[start + t, head, layout.column(tx, jj)]
                                    - decay_in[t] * acc[jj]
                                )
                            for s in T.serial(t):
                                for jj in layout.column_loop():
                                    u_loc[t, jj] = u_loc[t, jj] - a_mat[t, s] * u_loc[s, jj]
                        for t in T.serial(rows):
                            for jj in layout.column_loop():
                                acc[jj] = T.float32(0)
                            for i in T.serial(k_dim):
                                for jj in layout.column_loop():
                                    acc[jj] = acc[jj] + q[start + t, head_k, i] * s_loc[i, jj]
                            for jj in layout.column_loop():
                                acc[jj] = acc[jj] * decay_in[t]
                            for s in T.serial(t + 1):
                                for jj in layout.column_loop():
                                    acc[jj] = acc[jj] + p_mat[t, s] * u_loc[s, jj]
                            for jj in layout.column_loop():
                                out[start + t, head, layout.column(tx, jj)] = acc[jj]
                        for i in T.serial(k_dim):
                            for jj in layout.column_loop():
                                s_loc[i, jj] = s_loc[i, jj] * decay_in[rows - 1]
                        for t in T.serial(rows):
                            for i in T.serial(k_dim):
                                for jj in layout.column_loop():
                                    s_loc[i, jj] = s_loc[i, jj] + (
                                        k[start + t, head_k, i] * decay_out[t] * u_loc[t, jj]
                                    )
                for tx in layout.thread_loop():
                    for i in T.serial(k_dim):
                        for jj in layout.column_loop():
                            states[slot, head, i, layout.column(tx, jj)] = s_loc[i, jj]

    return chunked


def delta_rule_step(heads_k: int, heads_v: int, k_dim: int, v_dim: int, gpu: bool) -> tirx.PrimFunc:
    """`(q [batch, heads_k, k_dim], k [batch, heads_k, k_dim], v [batch, heads_v, v_dim],
    g [batch, heads_v], beta [batch, heads_v], slots [batch] i32,
    states [pool, heads_v, k_dim, v_dim]) -> out [batch, heads_v, v_dim]`: one token per
    sequence, its state at states[slots[b]], updated in place."""
    group = heads_v // heads_k
    layout = ColumnLayout(v_dim, gpu)
    per_thread = layout.columns_per_thread

    @T.prim_func(private=True, s_tir=True)
    def step(
        var_q: T.handle,
        var_k: T.handle,
        var_v: T.handle,
        var_g: T.handle,
        var_beta: T.handle,
        var_slots: T.handle,
        var_states: T.handle,
        var_out: T.handle,
    ) -> None:
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        batch = T.int64()
        pool = T.int64()
        q = T.match_buffer(var_q, (batch, heads_k, k_dim), "float32")
        k = T.match_buffer(var_k, (batch, heads_k, k_dim), "float32")
        v = T.match_buffer(var_v, (batch, heads_v, v_dim), "float32")
        g = T.match_buffer(var_g, (batch, heads_v), "float32")
        beta = T.match_buffer(var_beta, (batch, heads_v), "float32")
        slots = T.match_buffer(var_slots, (batch,), "int32")
        states = T.match_buffer(var_states, (pool, heads_v, k_dim, v_dim), "float32")
        out = T.match_buffer(var_out, (batch, heads_v, v_dim), "float32")
        for task in layout.task_loop(batch * heads_v):
            for tx in layout.thread_loop():
                with T.sblock("recurrent_step"):
                    T.reads()
                    T.writes()
                    acc = T.sblock_alloc_buffer((per_thread,), "float32", scope="local")
                    delta = T.sblock_alloc_buffer((per_thread,), "float32", scope="local")
                    seq: T.let[T.int64] = task // heads_v
                    slot: T.let[T.int64] = T.Cast("int64", slots[seq])
                    head: T.let[T.int64] = task % heads_v
                    head_k: T.let[T.int64] = head // group
                    decay: T.let[T.float32] = T.exp(g[seq, head])
                    for jj in layout.column_loop():
                        acc[jj] = T.float32(0)
                    for i in T.serial(k_dim):
                        for jj in layout.column_loop():
                            acc[jj] = acc[jj] + (
                                states[slot, head, i, layout.column(tx, jj)]
                                * decay
                                * k[seq, head_k, i]
                            )
                    for jj in layout.column_loop():
                        delta[jj] = (v[seq, head, layout.column(tx, jj)] - acc[jj]) * beta[
                            seq, head
                        ]
                        acc[jj] = T.float32(0)
                    for i in T.serial(k_dim):
                        for jj in layout.column_loop():
                            states[slot, head, i, layout.column(tx, jj)] = (
                                states[slot, head, i, layout.column(tx, jj)] * decay
                                + k[seq, head_k, i] * delta[jj]
                            )
                            acc[jj] = (
                                acc[jj]
                                + states[slot, head, i, layout.column(tx, jj)] * q[seq, head_k, i]
                            )
                    for jj in layout.column_loop():
                        out[seq, head, layout.column(tx, jj)] = acc[jj]

    return step
