"""The CPU kernel for paged decode attention (one new token per sequence over its cached keys).

Why: TVM 0.27's CPU kernel for it (`batch_decode_paged_kv_cpu`) runs on one thread and, per
key and query head, reduces a scalar dot product and calls `exp2f` three times: ≈ 100-130 ns
of CPU per (key, query head) on SmolLM2's shape, about 2 ms per layer and token at a
2,000-token context, which then costs more than the rest of the decode step. Here, with the
same signature and results:

- a task owns one sequence and one key/value head (`T.parallel`), and the query heads that
  share it advance together, so each key and value row is loaded once for all of them;
- dot products run as fused multiply-adds over vector chunks of the head dimension, one
  tree reduction of the lanes per (key, query head);
- keys come KEY_BLOCK at a time with an online softmax, its exp2 the polynomial of
  schedules/vector_math.py vectorised over the block's keys, and the values are accumulated
  vectorised over the head dimension.

The attention of one sequence's query vectors over its pages is `attend_pages`, a TIR macro
that the paged-prefill kernel (schedules/cpu_paged_prefill_attention.py) runs for each of its
query rows. Sliding-window layers keep TVM's kernel (their key ranges have a sink and an
offset); RoPE is applied before attention by the cache, and an inline-RoPE call
(`rotary_mode` 1) is refused by an assertion, as in schedules/cpu_attention.py.
`replace_cpu_paged_decode(cap)` swaps the kernel into a model's module on `llvm` targets when
the head dimension is a multiple of VECTOR.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm.script import tirx as T

from vllm_tvm.schedules import vector_math
from vllm_tvm.schedules.cpu_attention import LOG2E, NO_SCORE, as_f32, soft_capped, swap_kernel

DECODE_SYMBOL = "batch_decode_paged_kv_cpu"
"""TVM's CPU paged-decode kernel's global symbol (without a sliding window)."""

KEY_BLOCK = 64
"""Keys scored before the softmax state is rescaled."""

VECTOR = 16
"""fp32 lanes of one AVX-512 register: the chunk of a dot product (the head dimension must be
a whole number of them)."""

_PHANTOM_DENOMINATOR = 1.0
"""TVM's kernel starts its denominator at 1 with its maximum at NO_SCORE: one phantom key
that weighs nothing once a real key is seen, and gives an empty sequence zeros and an lse of
NO_SCORE. Kept, for the same results."""


def attend_pages(group: int, d: int, page_size: int, softcap: float | None) -> Callable[..., None]:
    """The TIR macro attending `group` query vectors (in `queries`, log2-scaled) of one
    key/value head `hk` over the first `n_keys` keys of a sequence whose pages start at
    `first_page` of the page table: the softmax numerators summed into `acc`, the maximum and
    denominator into `running_max` and `denominator` (scratch: `scores`, `partial`,
    `block_max`). Shared by the paged decode and paged prefill kernels."""

    @T.macro
    def attend(
        queries, scores, acc, partial, running_max, block_max, denominator,
        pages, page_values, first_page, n_keys, hk,
    ):  # fmt: skip
        for g, c in T.grid(group, d):
            acc[g, c] = T.float32(0)
        for g in T.serial(group):
            running_max[g] = T.float32(NO_SCORE)
            denominator[g] = T.float32(_PHANTOM_DENOMINATOR)
        for block in T.serial(T.ceildiv(n_keys, KEY_BLOCK)):
            start = T.Bind(block * KEY_BLOCK)
            present = T.Bind(T.min(KEY_BLOCK, n_keys - start))
            for j in T.serial(present):
                page = T.Bind(page_values[first_page + (start + j) // page_size])
                for g in T.serial(group):
                    for lane in T.vectorized(VECTOR):
                        partial[lane] = T.float32(0)
                    for co in T.serial(d // VECTOR):
                        for lane in T.vectorized(VECTOR):
                            partial[lane] += queries[g, co * VECTOR + lane] * as_f32(
                                pages[page, 0, hk, (start + j) % page_size, co * VECTOR + lane]
                            )
                    # the lanes summed as a tree: four dependent additions, not 16
                    for lane in T.vectorized(VECTOR // 2):
                        partial[lane] += partial[lane + VECTOR // 2]
                    for lane in T.vectorized(VECTOR // 4):
                        partial[lane] += partial[lane + VECTOR // 4]
                    for lane in T.vectorized(VECTOR // 8):
                        partial[lane] += partial[lane + VECTOR // 8]
                    scores[g, j] = soft_capped(partial[0] + partial[1], softcap)
            for g in T.serial(group):
                block_max[g] = running_max[g]
                for j in T.serial(present):
                    block_max[g] = T.max(block_max[g], scores[g, j])
                denominator[g] = denominator[g] * vector_math.exp2(running_max[g] - block_max[g])
                for c in T.vectorized(d):
                    acc[g, c] = acc[g, c] * vector_math.exp2(running_max[g] - block_max[g])
                running_max[g] = block_max[g]
                for j in T.vectorized(KEY_BLOCK):
                    scores[g, j] = vector_math.exp2(scores[g, j] - running_max[g])
                for j in T.serial(present):
                    denominator[g] = denominator[g] + scores[g, j]
            for j in T.serial(present):
                page = T.Bind(page_values[first_page + (start + j) // page_size])
                for g in T.serial(group):
                    for c in T.vectorized(d):
                        acc[g, c] += scores[g, j] * as_f32(
                            pages[page, 1, hk, (start + j) % page_size, c]
                        )

    return attend


def paged_decode_cpu(
    h_kv: int, h_q: int, d: int, dtype: str, page_size: int, softcap: float | None = None
) -> tvm.tirx.PrimFunc:
    """The kernel for `h_q` query heads over `h_kv` key/value heads of dimension `d` in pages
    of `page_size` tokens, its scores soft-capped at `softcap` when set."""
    group = h_q // h_kv
    if d % VECTOR:
        raise ValueError(f"head dimension {d} is not a multiple of {VECTOR}")
    attend = attend_pages(group, d, page_size, softcap)

    @T.prim_func(s_tir=True)
    def batch_decode_paged_kv(
        var_q: T.handle,
        var_pages: T.handle,
        var_page_indptr: T.handle,
        var_page_values: T.handle,
        var_length_info: T.handle,
        var_k_rope_pos_offset: T.handle,
        var_q_rope_position: T.handle,
        var_output: T.handle,
        var_lse: T.handle,
        rotary_mode: T.int32,
        rope_scale: T.float32,
        rope_theta: T.float32,
        sm_scale: T.float32,
    ):
        T.func_attr({"tirx.is_scheduled": True})
        batch_size, nnz_pages, max_num_pages = T.int32(), T.int32(), T.int32()
        indptr_off, values_off, k_rope_off, q_rope_off = T.int32(), T.int32(), T.int32(), T.int32()
        length_off = T.int32()
        q = T.match_buffer(var_q, (batch_size, h_q, d), dtype)
        pages = T.match_buffer(var_pages, (max_num_pages, 2, h_kv, page_size, d), dtype)
        page_indptr = T.match_buffer(
            var_page_indptr, (batch_size + 1,), "int32", elem_offset=indptr_off
        )
        page_values = T.match_buffer(var_page_values, (nnz_pages,), "int32", elem_offset=values_off)
        last_page_len = T.match_buffer(
            var_length_info, (batch_size,), "int32", elem_offset=length_off
        )
        T.match_buffer(var_k_rope_pos_offset, (batch_size,), "int32", elem_offset=k_rope_off)
        T.match_buffer(var_q_rope_position, (batch_size,), "int32", elem_offset=q_rope_off)
        output = T.match_buffer(var_output, (batch_size, h_q, d), dtype)
        lse = T.match_buffer(var_lse, (batch_size, h_q), "float32")
        assert rotary_mode == 0, "this CPU decode kernel expects RoPE applied before attention"

        for task in T.parallel(batch_size * h_kv):
            with T.sblock("sequence_head"):
                T.reads()
                T.writes()
                queries = T.sblock_alloc_buffer((group, d), "float32")
                scores = T.sblock_alloc_buffer((group, KEY_BLOCK), "float32")
                acc = T.sblock_alloc_buffer((group, d), "float32")
                partial = T.sblock_alloc_buffer((VECTOR,), "float32")
                running_max = T.sblock_alloc_buffer((group,), "float32")
                block_max = T.sblock_alloc_buffer((group,), "float32")
                denominator = T.sblock_alloc_buffer((group,), "float32")
                b = T.Bind(task // h_kv)
                hk = T.Bind(task % h_kv)
                first_page = T.Bind(page_indptr[b])
                n_pages = T.Bind(page_indptr[b + 1] - first_page)
                n_keys = T.Bind(
                    T.if_then_else(n_pages > 0, (n_pages - 1) * page_size + last_page_len[b], 0)
                )
                for g, c in T.grid(group, d):
                    queries[g, c] = as_f32(q[b, hk * group + g, c]) * sm_scale * T.float32(LOG2E)
                attend(
                    queries, scores, acc, partial, running_max, block_max, denominator,
                    pages, page_values, first_page, n_keys, hk,
                )  # fmt: skip
                for g in T.serial(group):
                    for c in T.vectorized(d):
                        output[b, hk * group + g, c] = T.Cast(dtype, acc[g, c] / denominator[g])
                    lse[b, hk * group + g] = running_max[g] + T.log2(denominator[g])

    return batch_decode_paged_kv


PagedBuilder = Callable[[int, int, int, str, int, "float | None"], tvm.tirx.PrimFunc]
"""(h_kv, h_q, head_dim, dtype, page_size, softcap) -> a paged attention kernel of ours."""


def paged_kernel_swap(
    symbol: str, pages_param: int, build: PagedBuilder, softcap: float | None, name: str
) -> tvm.transform.Pass:
    """The pass swapping TVM's paged-attention kernel `symbol` (its KV pages the parameter at
    `pages_param`) for `build`'s kernel of the same shapes, its scores soft-capped at
    `softcap` when set; head dims not a multiple of the vector width keep TVM's."""

    def ours(stock: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc | None:
        q, pages = stock.params[0], stock.params[pages_param]  # buffers, by signature
        h_q, d = int(q.shape[1]), int(q.shape[2])
        h_kv, page_size = int(pages.shape[2]), int(pages.shape[3])
        if d % VECTOR or int(pages.shape[4]) != d:
            return None
        return build(h_kv, h_q, d, str(q.dtype), page_size, softcap)

    return tvm.transform.module_pass(
        lambda mod, _ctx: swap_kernel(mod, symbol, ours), opt_level=0, name=name
    )


def replace_cpu_paged_decode(softcap: float | None = None) -> tvm.transform.Pass:
    """The pass swapping TVM's CPU paged-decode kernel for `paged_decode_cpu` where the shapes
    allow, its scores soft-capped at `softcap` when set."""
    return paged_kernel_swap(DECODE_SYMBOL, 1, paged_decode_cpu, softcap, "ReplaceCPUPagedDecode")
