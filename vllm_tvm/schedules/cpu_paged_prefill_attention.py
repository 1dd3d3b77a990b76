"""The CPU kernel for paged prefill attention (new query rows over a sequence's cached pages).

Why: TVM's paged KV cache calls this kernel whenever a chunk of new tokens extends a sequence
with cached keys: chunked prefill, a prompt after a cached prefix, the verify step of
speculative decoding. TVM 0.27's CPU kernel for it (`batch_prefill_paged_kv_cpu`) runs on
one thread and, per key and query head, reduces a scalar dot product and calls `exp2f` three
times. On SmolLM2-135M a 5-token chunk after a 300-token context cost ≈ 82 ms against 15 ms
for a one-token decode step. Here, with the same signature and results:

- a task owns one query row and one key/value head (`T.parallel` over both, so that a short
  chunk still spreads over the worker pool); it finds its sequence in `q_indptr`;
- each row attends to its sequence's keys exactly as a decode query does
  (`attend_pages` of schedules/cpu_decode_attention.py: the query heads sharing a key/value
  head advance together, vector dot products, an online softmax over key blocks with the
  polynomial exp2 of schedules/vector_math.py);
- `causal` is honoured as TVM's kernel does: row i of a chunk of n rows over k keys sees the
  first k - n + i + 1 of them, all k without the flag.

Sliding-window layers keep TVM's kernel (their key ranges have a sink and an offset); RoPE is
applied before attention by the cache, and an inline-RoPE call (`rotary_mode` 1) is refused
by an assertion. `replace_cpu_paged_prefill(cap)` swaps the kernel into a model's module on
`llvm` targets when the head dimension is a multiple of VECTOR.
"""

from __future__ import annotations

import tvm
from tvm.script import tirx as T

from vllm_tvm.schedules.cpu_attention import LOG2E, as_f32
from vllm_tvm.schedules.cpu_decode_attention import (
    KEY_BLOCK,
    VECTOR,
    attend_pages,
    paged_kernel_swap,
)

PREFILL_SYMBOL = "batch_prefill_paged_kv_cpu"
"""TVM's CPU paged-prefill kernel's global symbol (without a sliding window)."""


def paged_prefill_cpu(
    h_kv: int, h_q: int, d: int, dtype: str, page_size: int, softcap: float | None = None
) -> tvm.tirx.PrimFunc:
    """The kernel for `h_q` query heads over `h_kv` key/value heads of dimension `d` in pages
    of `page_size` tokens, its scores soft-capped at `softcap` when set."""
    group = h_q // h_kv
    if d % VECTOR:
        raise ValueError(f"head dimension {d} is not a multiple of {VECTOR}")
    attend = attend_pages(group, d, page_size, softcap)

    @T.prim_func(s_tir=True)
    def batch_prefill_paged_kv(
        var_q: T.handle,
        var_q_indptr: T.handle,
        var_pages: T.handle,
        var_page_indptr: T.handle,
        var_page_values: T.handle,
        var_length_info: T.handle,
        var_k_rope_pos_offset: T.handle,
        var_q_rope_position: T.handle,
        var_output: T.handle,
        var_lse: T.handle,
        causal: T.int32,
        rotary_mode: T.int32,
        rope_scale: T.float32,
        rope_theta: T.float32,
        sm_scale: T.float32,
    ):
        T.func_attr({"tirx.is_scheduled": True})
        batch_size, total_len, nnz_pages, max_num_pages = T.int32(), T.int32(), T.int32(), T.int32()
        q_indptr_off, indptr_off, values_off = T.int32(), T.int32(), T.int32()
        k_rope_off, q_rope_off, length_off = T.int32(), T.int32(), T.int32()
        q = T.match_buffer(var_q, (total_len, h_q, d), dtype)
        q_indptr = T.match_buffer(
            var_q_indptr, (batch_size + 1,), "int32", elem_offset=q_indptr_off
        )
        pages = T.match_buffer(var_pages, (max_num_pages, 2, h_kv, page_size, d), dtype)
        page_indptr = T.match_buffer(
            var_page_indptr, (batch_size + 1,), "int32", elem_offset=indptr_off
        )
        page_values = T.match_buffer(var_page_values, (nnz_pages,), "int32", elem_offset=values_off)
        last_page_len = T.match_buffer(
            var_length_info, (batch_size,), "int32", elem_offset=length_off
        )
        T.match_buffer(var_k_rope_pos_offset, (batch_size,), "int32", elem_offset=k_rope_off)
        T.match_buffer(var_q_rope_position, (total_len,), "int32", elem_offset=q_rope_off)
        output = T.match_buffer(var_output, (total_len, h_q, d), dtype)
        lse = T.match_buffer(var_lse, (total_len, h_q), "float32")
        assert rotary_mode == 0, "this CPU prefill kernel expects RoPE applied before attention"

        for task in T.parallel(total_len * h_kv):
            with T.sblock("row_head"):
                T.reads()
                T.writes()
                owner = T.sblock_alloc_buffer((1,), "int32")
                queries = T.sblock_alloc_buffer((group, d), "float32")
                scores = T.sblock_alloc_buffer((group, KEY_BLOCK), "float32")
                acc = T.sblock_alloc_buffer((group, d), "float32")
                partial = T.sblock_alloc_buffer((VECTOR,), "float32")
                running_max = T.sblock_alloc_buffer((group,), "float32")
                block_max = T.sblock_alloc_buffer((group,), "float32")
                denominator = T.sblock_alloc_buffer((group,), "float32")
                row = T.Bind(task // h_kv)
                hk = T.Bind(task % h_kv)
                # the row's sequence: the last whose first row is at or before it
                owner[0] = 0
                for s in T.serial(batch_size):
                    if q_indptr[s] <= row:
                        owner[0] = s
                b = T.Bind(owner[0])
                first_page = T.Bind(page_indptr[b])
                n_pages = T.Bind(page_indptr[b + 1] - first_page)
                n_keys = T.Bind(
                    T.if_then_else(n_pages > 0, (n_pages - 1) * page_size + last_page_len[b], 0)
                )
                rows_after = T.Bind(q_indptr[b + 1] - 1 - row)
                visible = T.Bind(T.if_then_else(causal > 0, T.max(n_keys - rows_after, 0), n_keys))
                for g, c in T.grid(group, d):
                    queries[g, c] = as_f32(q[row, hk * group + g, c]) * sm_scale * T.float32(LOG2E)
                attend(
                    queries, scores, acc, partial, running_max, block_max, denominator,
                    pages, page_values, first_page, visible, hk,
                )  # fmt: skip
                for g in T.serial(group):
                    for c in T.vectorized(d):
                        output[row, hk * group + g, c] = T.Cast(dtype, acc[g, c] / denominator[g])
                    lse[row, hk * group + g] = running_max[g] + T.log2(denominator[g])

    return batch_prefill_paged_kv


def replace_cpu_paged_prefill(softcap: float | None = None) -> tvm.transform.Pass:
    """The pass swapping TVM's CPU paged-prefill kernel for `paged_prefill_cpu` where the
    shapes allow, its scores soft-capped at `softcap` when set."""
    return paged_kernel_swap(
        PREFILL_SYMBOL, 2, paged_prefill_cpu, softcap, "ReplaceCPUPagedPrefill"
    )
