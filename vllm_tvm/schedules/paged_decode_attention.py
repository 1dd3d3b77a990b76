"""Decode attention over paged KV for one GQA group a thread block: TIR, GPU and CPU forms.

Why our own: TVM's `batch_decode_paged_kv` (tvm.relax.frontend.nn.llm._decode_kernels)
gives each query head its own threads, so the GQA group's heads each read the same K/V rows
again, and it reads them a few elements a thread; on the H200 at the Llama-3.1-8B attention
shape it ran at about 30 % of the KV-read floor. Here one task (a thread block on GPUs) owns
(part, KV head): it loads a tile of the part's K and V rows once, 16 bytes a thread a load,
into shared memory, and every query head of the group attends over that tile, scores and
outputs accumulated in fp32 with the online softmax (running max and sum a head).

A "part" is a row of the batch or, with split KV, a consecutive run of a row's pages
(runtime/kv/decode_step_buffers.py lays them out); each part's output comes with its
log-sum-exp, in log2 units as TVM's kernel gives it, so compiler/device_decode_attention.py
merges split parts unchanged. A part without keys (a padding row, a split past the row's
end) writes zeros and lse -5e4, which weighs nothing beside a part with keys.

The GPU and CPU forms are the same loops: a task's phases run over "threads" that stride its
work; on GPUs a thread block of `GPU_THREADS` (TVM's lowering puts the barriers between
phases), on CPUs one thread owning all of it, tasks on the worker pool.
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.script import tirx as T

TILE = 64
"""KV rows a task loads into shared memory at a time (4 pages of 16)."""
GPU_THREADS = 128
VECTOR_BYTES = 16
EMPTY_LSE = -5e4
"""lse of a part without keys, as TVM's kernel writes it."""
_MASKED = -1e30
"""Score of a tile slot past the part's last key: exp2 of it less any real max is 0."""
_K_ROW_PAD = 8
"""Elements added to a shared K row so the group's threads, reading different rows at one
column, fall on different banks (a 272-byte row stride for head 128 in bf16). The padded
tiles are flat buffers: TVM compacts a 2-D one to the columns it sees used."""
_Q_ROW_PAD = 4
"""Likewise for the group's fp32 queries, read a row a head, 16 bytes at a time."""
_FP32_VECTOR = 4


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def paged_decode_attention(
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: str,
    page_size: int,
    gpu: bool,
) -> tirx.PrimFunc:
    """`(q [parts, q heads, d], pages [num_pages, 2, kv heads, page, d], page_indptr
    [parts + 1] i32, page_values [n] i32, last_page_len [parts] i32) -> (output [parts,
    q heads, d] dtype, lse [parts, q heads] f32)`, scale 1/sqrt(d), no RoPE: part p attends
    over the keys of pages page_values[page_indptr[p] .. page_indptr[p + 1]], all full but
    the last, which holds last_page_len[p]."""
    group = num_q_heads // num_kv_heads
    if group * num_kv_heads != num_q_heads:
        raise ValueError(f"{num_q_heads} query heads do not group over {num_kv_heads} KV heads")
    element_bytes = tvm.DataType(dtype).bits // 8
    vector = VECTOR_BYTES // element_bytes
    if head_dim % vector:
        raise ValueError(f"head_dim {head_dim} is not a multiple of {vector} {dtype} elements")
    threads = GPU_THREADS if gpu else 1
    row_vectors = head_dim // vector
    load_rounds = _ceil_div(TILE * row_vectors, threads)
    score_rounds = _ceil_div(group * TILE, threads)
    output_rounds = _ceil_div(group * head_dim, threads)
    score_scale = head_dim**-0.5 * math.log2(math.e)
    shared = "shared" if gpu else "global"
    k_stride = head_dim + _K_ROW_PAD
    q_stride = head_dim + _Q_ROW_PAD

    def task_loop(tasks: int):
        return T.thread_binding(tasks, thread="blockIdx.x") if gpu else T.parallel(tasks)

    def staged_loop(rounds: int):
        """Over a thread's staged vectors: unrolled on GPUs, so they stay in registers."""
        return T.unroll(rounds) if gpu else T.serial(rounds)

    def thread_loop():
        return T.thread_binding(threads, thread="threadIdx.x") if gpu else T.serial(1)

    @T.macro(hygienic=False)
    def fetch_tile(staged, pages, page_values, first_page, kv_head, keys, tile, tx):
        # A thread's share of a tile's K and V rows into its registers, one 16-byte vector
        # a round; rows past the part's keys are zeros (0 weight times a stale row could be
        # NaN).
        for rnd in staged_loop(load_rounds):
            flat: T.let[T.int32] = rnd * threads + tx
            row: T.let[T.int32] = flat // row_vectors
            column: T.let[T.int32] = flat % row_vectors * vector
            key: T.let[T.int32] = tile * TILE + row
            if row < TILE:
                if key < keys:
                    page: T.let[T.int32] = page_values[first_page + key // page_size]
                    slot: T.let[T.int32] = key % page_size
                    for half in staged_loop(2):
                        for e in T.vectorized(vector):
                            staged[half, rnd * vector + e] = pages[
                                page, half, kv_head, slot, column + e
                            ]
                else:
                    for half in staged_loop(2):
                        for e in T.vectorized(vector):
                            staged[half, rnd * vector + e] = T.Cast(dtype, 0)

    @T.prim_func(private=True, s_tir=True)
    def decode(
        var_q: T.handle,
        var_pages: T.handle,
        var_page_indptr: T.handle,
        var_page_values: T.handle,
        var_last_page_len: T.handle,
        var_output: T.handle,
        var_lse: T.handle,
    ) -> None:
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        parts = T.int32()
        num_pages = T.int32()
        num_values = T.int32()
        # The metadata are views into one buffer (runtime/kv/decode_step_buffers.py).
        indptr_offset = T.int32()
        values_offset = T.int32()
        last_len_offset = T.int32()
        q = T.match_buffer(var_q, (parts, num_q_heads, head_dim), dtype)
        pages = T.match_buffer(var_pages, (num_pages, 2, num_kv_heads, page_size, head_dim), dtype)
        page_indptr = T.match_buffer(
            var_page_indptr, (parts + 1,), "int32", elem_offset=indptr_offset
        )
        page_values = T.match_buffer(
            var_page_values, (num_values,), "int32", elem_offset=values_offset
        )
        last_page_len = T.match_buffer(
            var_last_page_len, (parts,), "int32", elem_offset=last_len_offset
        )
        output = T.match_buffer(var_output, (parts, num_q_heads, head_dim), dtype)
        lse = T.match_buffer(var_lse, (parts, num_q_heads), "float32")
        for task in task_loop(parts * num_kv_heads):
            part: T.let[T.int32] = task // num_kv_heads
            kv_head: T.let[T.int32] = task % num_kv_heads
            first_page: T.let[T.int32] = page_indptr[part]
            part_pages: T.let[T.int32] = page_indptr[part + 1] - first_page
            keys: T.let[T.int32] = T.if_then_else(
                part_pages > 0, (part_pages - 1) * page_size + last_page_len[part], 0
            )
            with T.sblock("group_attention"):
                T.reads()
                T.writes()
                q_tile = T.sblock_alloc_buffer((group * q_stride,), "float32", scope=shared)
                k_tile = T.sblock_alloc_buffer((TILE * k_stride,), dtype, scope=shared)
                v_tile = T.sblock_alloc_buffer((TILE, head_dim), dtype, scope=shared)
                scores = T.sblock_alloc_buffer((group, TILE), "float32", scope=shared)
                weights = T.sblock_alloc_buffer((group, TILE), "float32", scope=shared)
                # Each thread's own copy of the heads' online-softmax state.
                running_max = T.sblock_alloc_buffer((group,), "float32", scope="local")
                running_sum = T.sblock_alloc_buffer((group,), "float32", scope="local")
                rescale = T.sblock_alloc_buffer((group,), "float32", scope="local")
                acc = T.sblock_alloc_buffer((output_rounds,), "float32", scope="local")
                dot = T.sblock_alloc_buffer((1,), "float32", scope="local")
                k_chunk = T.sblock_alloc_buffer((vector,), dtype, scope="local")
                q_chunk = T.sblock_alloc_buffer((vector,), "float32", scope="local")
                # A thread's share of the next tile's K (0) and V (1), in registers.
                staged = T.sblock_alloc_buffer((2, load_rounds * vector), dtype, scope="local")
                # The group's queries, pre-scaled into log2 units; the running state.
                for tx in thread_loop():
                    for rnd in T.serial(output_rounds):
                        flat: T.let[T.int32] = rnd * threads + tx
                        if flat < group * head_dim:
                            q_tile[flat // head_dim * q_stride + flat % head_dim] = T.Cast(
                                "float32",
                                q[part, kv_head * group + flat // head_dim, flat % head_dim],
                            ) * T.float32(score_scale)
                        acc[rnd] = T.float32(0)
                    for g in T.serial(group):
                        running_max[g] = T.float32(_MASKED)
                        running_sum[g] = T.float32(0)
                for tx in thread_loop():
                    fetch_tile(staged, pages, page_values, first_page, kv_head, keys, 0, tx)
                for tile in T.serial((keys + TILE - 1) // TILE):
                    # The staged tile into shared memory; then the next tile's loads are
                    # issued, in flight while this tile is attended.
                    for tx in thread_loop():
                        for rnd in staged_loop(load_rounds):
                            flat: T.let[T.int32] = rnd * threads + tx
                            row: T.let[T.int32] = flat // row_vectors
                            column: T.let[T.int32] = flat % row_vectors * vector
                            if row < TILE:
                                for e in T.vectorized(vector):
                                    k_tile[row * k_stride + column + e] = staged[
                                        0, rnd * vector + e
                                    ]
                                for e in T.vectorized(vector):
                                    v_tile[row, column + e] = staged[1, rnd * vector + e]
                    for tx in thread_loop():
                        fetch_tile(
                            staged, pages, page_values, first_page, kv_head, keys, tile + 1, tx
                        )
                    # Scores of every (head, row) pair; heads fastest, so a warp's threads
                    # read few rows, each broadcast to the group.
                    for tx in thread_loop():
                        for rnd in T.serial(score_rounds):
                            flat: T.let[T.int32] = rnd * threads + tx
                            g: T.let[T.int32] = flat % group
                            row: T.let[T.int32] = flat // group
                            if row < TILE:
                                if tile * TILE + row < keys:
                                    # 16-byte shared reads into registers.
                                    dot[0] = T.float32(0)
                                    for c in T.serial(row_vectors):
                                        for e in T.vectorized(vector):
                                            k_chunk[e] = k_tile[row * k_stride + c * vector + e]
                                        for h in T.serial(vector // _FP32_VECTOR):
                                            for e in T.vectorized(_FP32_VECTOR):
                                                q_chunk[h * _FP32_VECTOR + e] = q_tile[
                                                    g * q_stride + c * vector + h * _FP32_VECTOR + e
                                                ]
                                        for e in T.unroll(vector):
                                            dot[0] = dot[0] + q_chunk[e] * T.Cast(
                                                "float32", k_chunk[e]
                                            )
                                    scores[g, row] = dot[0]
                                else:
                                    scores[g, row] = T.float32(_MASKED)
                    # Every thread: each head's new running max and the factor its state
                    # shrinks by (its own copy, in registers); then the tile's weights.
                    for tx in thread_loop():
                        for g in T.serial(group):
                            dot[0] = running_max[g]
                            for row in T.serial(TILE):
                                dot[0] = T.max(dot[0], scores[g, row])
                            rescale[g] = T.exp2(running_max[g] - dot[0])
                            running_max[g] = dot[0]
                        for rnd in T.serial(score_rounds):
                            flat: T.let[T.int32] = rnd * threads + tx
                            if flat < group * TILE:
                                g: T.let[T.int32] = flat % group
                                row: T.let[T.int32] = flat // group
                                weights[g, row] = T.exp2(scores[g, row] - running_max[g])
                    # Every thread: the heads' sums, and its outputs (head, column).
                    for tx in thread_loop():
                        for g in T.serial(group):
                            dot[0] = T.float32(0)
                            for row in T.serial(TILE):
                                dot[0] = dot[0] + weights[g, row]
                            running_sum[g] = running_sum[g] * rescale[g] + dot[0]
                        for rnd in T.serial(output_rounds):
                            flat: T.let[T.int32] = rnd * threads + tx
                            if flat < group * head_dim:
                                acc[rnd] = acc[rnd] * rescale[flat // head_dim]
                        # Rows outermost: a thread's outputs share a column when the block
                        # has head_dim threads, so each V element is read once.
                        for row in T.serial(TILE):
                            for rnd in T.serial(output_rounds):
                                flat: T.let[T.int32] = rnd * threads + tx
                                if flat < group * head_dim:
                                    acc[rnd] = acc[rnd] + weights[flat // head_dim, row] * T.Cast(
                                        "float32", v_tile[row, flat % head_dim]
                                    )
                for tx in thread_loop():
                    for rnd in T.serial(output_rounds):
                        flat: T.let[T.int32] = rnd * threads + tx
                        if flat < group * head_dim:
                            g: T.let[T.int32] = flat // head_dim
                            head: T.let[T.int32] = kv_head * group + g
                            if keys > 0:
                                output[part, head, flat % head_dim] = T.Cast(
                                    dtype, acc[rnd] / running_sum[g]
                                )
                                if flat % head_dim == 0:
                                    lse[part, head] = running_max[g] + T.log2(running_sum[g])
                            else:
                                output[part, head, flat % head_dim] = T.Cast(dtype, 0)
                                if flat % head_dim == 0:
                                    lse[part, head] = T.float32(EMPTY_LSE)

    return decode
