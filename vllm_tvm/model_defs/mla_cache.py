"""TVM's paged KV cache in its multi-head latent attention (MLA) mode, on CPU and CUDA.

Why: an MLA model (DeepSeek-V2/V3) caches per token and layer only the compressed latent
(kv_lora_rank) and the shared rope key (qk_rope_head_dim), not full keys and values.
TVM's runtime cache has that mode (pages [pages, page_size, latent + rope]), but its Python
wrapper builds it only with CUDA kernels and refuses MLA for `llvm`. This module builds the
same runtime object for CPU: TVM's own CPU kernels where they fit (ragged self-attention
over the new tokens, state merge, latent append, debug read), and two kernels written here:

- `mla_paged_attention_cpu`: absorbed attention of queries [tokens, heads, latent + rope]
  over the cached latents of their sequences, values = the latent part (what the runtime
  calls for `cross_attention`); log2-domain LSE like TVM's kernels, so their merge applies;
- `copy_single_page_mla_cpu`: the partial-page copy of a fork (prefix sharing).

How the runtime uses the cache decides which attention calls a forward must make (see
deepseek.py): when every sequence appends one token the runtime appends before attention
and `cross_attention` sees the new tokens too (decode: cross only); otherwise the cache
pages hold only what was there before the forward (first chunk: self only; later chunks:
self + cross, merged).

On CUDA TVM's own wrapper (`TIRPagedKVCache` in MLA mode) has every kernel, in TIR: the
same runtime object with GPU kernels (`mla_paged_kv_cache` picks per target).
"""

from __future__ import annotations

import math

import tvm
from tvm import relax as rx
from tvm import tirx
from tvm.relax.frontend.nn.llm.kv_cache import (
    PagedKVCache,
    RopeMode,
    TIRPagedKVCache,
    _attention_prefill_ragged_cpu,
    _compact_kv_copy_cpu,
    _kv_cache_debug_get_kv_mla,
    _kv_cache_transpose_append_mla,
    _merge_state_inplace_cpu,
    llama_rope_with_position_map,
)
from tvm.script import tirx as T
from tvm.target import Target

PAGE_SIZE = 16
"""Tokens per page: the page size TVM's append kernel is built for (runtime: COMPILED_PAGE_SIZE)."""
LOG2E = math.log2(math.e)
EMPTY_LSE = -1e30
"""LSE of a query with nothing cached to attend to: merges with weight exp2(-1e30) = 0."""


def mla_paged_attention_cpu(heads: int, latent: int, rope: int, dtype: str) -> tirx.PrimFunc:
    """Attention of each query over its sequence's cached [latent | rope] rows (values =
    latent), with the signature the runtime's MLA paged-prefill call passes."""
    width = latent + rope

    @T.prim_func(private=True, s_tir=True)
    def attention(
        var_q: T.handle,
        var_q_indptr: T.handle,
        var_pages: T.handle,
        var_page_indptr: T.handle,
        var_page_values: T.handle,
        var_length_info: T.handle,
        var_output: T.handle,
        var_lse: T.handle,
        causal: T.int32,
        sm_scale: T.float32,
    ) -> None:
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        batch = T.int32()
        tokens = T.int32()
        nnz_pages = T.int32()
        max_pages = T.int32()
        q_indptr_offset = T.int32()
        pages_offset = T.int64()
        page_indptr_offset = T.int32()
        page_values_offset = T.int32()
        length_info_offset = T.int32()
        q = T.match_buffer(var_q, (tokens, heads, width), dtype)
        q_indptr = T.match_buffer(var_q_indptr, (batch + 1,), "int32", elem_offset=q_indptr_offset)
        pages = T.match_buffer(
            var_pages, (max_pages, PAGE_SIZE, width), dtype, elem_offset=pages_offset
        )
        page_indptr = T.match_buffer(
            var_page_indptr, (batch + 1,), "int32", elem_offset=page_indptr_offset
        )
        page_values = T.match_buffer(
            var_page_values, (nnz_pages,), "int32", elem_offset=page_values_offset
        )
        length_info = T.match_buffer(
            var_length_info, (batch,), "int32", elem_offset=length_info_offset
        )
        output = T.match_buffer(var_output, (tokens, heads, latent), dtype)
        lse = T.match_buffer(var_lse, (tokens, heads), "float32")
        for b in T.serial(batch):
            for row in T.serial(q_indptr[b + 1] - q_indptr[b]):
                for h in T.serial(heads):
                    with T.sblock("mla_attention"):
                        T.reads(
                            q[0:tokens, 0:heads, 0:width],
                            q_indptr[0 : batch + 1],
                            pages[0:max_pages, 0:PAGE_SIZE, 0:width],
                            page_indptr[0 : batch + 1],
                            page_values[0:nnz_pages],
                            length_info[0:batch],
                        )
                        T.writes(output[0:tokens, 0:heads, 0:latent], lse[0:tokens, 0:heads])
                        acc = T.sblock_alloc_buffer((latent,), "float32")
                        state = T.sblock_alloc_buffer((4,), "float32")
                        # state: running max, running sum, this score, rescale factor
                        i: T.int32 = q_indptr[b] + row
                        num_pages: T.int32 = page_indptr[b + 1] - page_indptr[b]
                        kv_len: T.int32 = T.if_then_else(
                            num_pages > 0, (num_pages - 1) * PAGE_SIZE + length_info[b], 0
                        )
                        q_len: T.int32 = q_indptr[b + 1] - q_indptr[b]
                        visible: T.int32 = T.if_then_else(
                            causal > 0, kv_len - q_len + row + 1, kv_len
                        )
                        state[0] = T.float32(-3.0e38)
                        state[1] = T.float32(0)
                        for c in T.serial(latent):
                            acc[c] = T.float32(0)
                        for j in T.serial(visible):
                            page: T.int32 = page_values[page_indptr[b] + j // PAGE_SIZE]
                            slot: T.int32 = j % PAGE_SIZE
                            state[2] = T.float32(0)
                            for c in T.serial(width):
                                state[2] = state[2] + T.cast(q[i, h, c], "float32") * T.cast(
                                    pages[page, slot, c], "float32"
                                )
                            state[2] = state[2] * sm_scale * T.float32(LOG2E)
                            state[3] = T.exp2(state[0] - T.max(state[0], state[2]))
                            state[0] = T.max(state[0], state[2])
                            state[2] = T.exp2(state[2] - state[0])
                            state[1] = state[1] * state[3] + state[2]
                            for c in T.serial(latent):
                                acc[c] = acc[c] * state[3] + state[2] * T.cast(
                                    pages[page, slot, c], "float32"
                                )
                        for c in T.serial(latent):
                            output[i, h, c] = T.cast(
                                T.if_then_else(visible > 0, acc[c] / state[1], T.float32(0)),
                                dtype,
                            )
                        lse[i, h] = T.if_then_else(
                            visible > 0, state[0] + T.log2(state[1]), T.float32(EMPTY_LSE)
                        )

    return attention


def copy_single_page_mla_cpu(width: int, dtype: str) -> tirx.PrimFunc:
    """pages[target, :length] = pages[source, :length] (a fork inside a partly filled page)."""

    @T.prim_func(private=True, s_tir=True)
    def copy_page(
        var_pages: T.handle, src_page_id: T.int64, tgt_page_id: T.int64, copy_length: T.int64
    ) -> None:
        T.func_attr({"tirx.is_scheduled": True})
        num_pages = T.int32()
        pages_offset = T.int64()
        pages = T.match_buffer(
            var_pages, (num_pages, PAGE_SIZE, width), dtype, elem_offset=pages_offset
        )
        for position, feature in T.grid(copy_length, width):
            with T.sblock("copy"):
                vp, vf = T.axis.remap("SS", [position, feature])
                pages[tgt_page_id, vp, vf] = pages[src_page_id, vp, vf]

    return copy_page


class CPUMLAPagedKVCache(PagedKVCache):
    """The runtime paged KV cache in MLA mode, with CPU kernels (see the module docstring)."""

    def __init__(
        self,
        max_batch_size: tirx.Var,
        max_total_seq_len: tirx.Var,
        prefill_chunk_size: tirx.Var,
        page_size: tirx.Var,
        support_sliding_window: tirx.Var,
        num_hidden_layers: int,
        num_attention_heads: int,
        kv_lora_rank: int,
        qk_rope_head_dim: int,
        qk_nope_head_dim: int,
        v_head_dim: int,
        dtype: str,
    ) -> None:
        bb = rx.BlockBuilder.current()
        width = kv_lora_rank + qk_rope_head_dim
        ragged_qk = qk_nope_head_dim + qk_rope_head_dim
        heads = num_attention_heads
        no_kernel = rx.Tuple([])

        def tir(func: tirx.PrimFunc, name: str) -> rx.Tuple:
            return rx.Tuple([tvm.ir.StringImm("tirx"), bb.add_func(func, name)])

        merge = bb.add_func(_merge_state_inplace_cpu(dtype), "tir_attention_merge_state_cpu")
        args = [
            rx.ShapeExpr(
                [
                    max_batch_size,
                    max_total_seq_len,
                    prefill_chunk_size,
                    page_size,
                    support_sliding_window,
                    1,  # per-layer sliding window size (unused: no sliding layers)
                ]
            ),
            rx.ShapeExpr([0, num_hidden_layers]),
            rx.prim_value(heads),
            rx.prim_value(1),  # one latent "head" per token
            rx.prim_value(width),
            rx.prim_value(kv_lora_rank),
            rx.ShapeExpr([1] * num_hidden_layers),  # AttnKind.MLA on every layer
            rx.prim_value(False),
            rx.prim_value(RopeMode.NONE),  # the model applies RoPE itself
            rx.prim_value(1.0),
            rx.prim_value(10000.0),
            rx.prim_value(0),
            rx.op.zeros((), dtype),
            rx.prim_value(0),  # no MHA append
            bb.add_func(_kv_cache_transpose_append_mla(width, dtype), "kv_cache_append_mla"),
            tir(
                _attention_prefill_ragged_cpu(heads, heads, ragged_qk, v_head_dim, dtype, {}),
                "tir_attention_prefill_ragged_cpu",
            ),
            *[no_kernel] * 6,  # MHA paged / sliding / tree kernels: no MHA layers
            tir(
                mla_paged_attention_cpu(heads, kv_lora_rank, qk_rope_head_dim, dtype),
                "tir_attention_mla_paged_cpu",
            ),
            rx.Tuple([merge, merge]),
            bb.add_func(
                llama_rope_with_position_map(10000.0, 1.0, width, heads, 1, dtype, {}, width),
                "tir_split_rotary",
            ),
            bb.add_func(copy_single_page_mla_cpu(width, dtype), "kv_cache_copy_single_page_mla"),
            bb.add_func(
                _kv_cache_debug_get_kv_mla(num_hidden_layers, width, dtype),
                "kv_cache_debug_get_kv_mla",
            ),
            bb.add_func(_compact_kv_copy_cpu(1, width, dtype), "kv_cache_compact_kv_copy_cpu"),
        ]
        super().__init__(
            _expr=rx.call_pure_packed(
                "vm.builtin.paged_attention_kv_cache_create", *args, ty_args=rx.AnyType()
            ),
            _name="paged_kv_cache",
        )


def mla_paged_kv_cache(
    target: Target,
    max_batch_size: tirx.Var,
    max_total_seq_len: tirx.Var,
    prefill_chunk_size: tirx.Var,
    page_size: tirx.Var,
    support_sliding_window: tirx.Var,
    num_hidden_layers: int,
    num_attention_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    qk_nope_head_dim: int,
    v_head_dim: int,
    dtype: str,
) -> PagedKVCache:
    """The MLA cache with `target`'s kernels: ours on CPU, TVM's TIR kernels on CUDA."""
    if target.kind.name == "llvm":
        return CPUMLAPagedKVCache(
            max_batch_size,
            max_total_seq_len,
            prefill_chunk_size,
            page_size,
            support_sliding_window,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=qk_rope_head_dim,
            qk_nope_head_dim=qk_nope_head_dim,
            v_head_dim=v_head_dim,
            dtype=dtype,
        )
    width = kv_lora_rank + qk_rope_head_dim
    return TIRPagedKVCache(
        attn_kind="mla",
        max_batch_size=max_batch_size,
        max_total_seq_len=max_total_seq_len,
        prefill_chunk_size=prefill_chunk_size,
        page_size=page_size,
        support_sliding_window=support_sliding_window,
        layer_partition=rx.ShapeExpr([0, num_hidden_layers]),
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=1,  # one latent "head" per token
        qk_head_dim=width,
        v_head_dim=kv_lora_rank,
        mla_original_qk_head_dim=qk_nope_head_dim + qk_rope_head_dim,
        mla_original_v_head_dim=v_head_dim,
        rope_mode=RopeMode.NONE,  # the model applies RoPE itself
        rope_scale=1,
        rope_theta=10000,
        rope_scaling={},
        rope_ext_factors=rx.prim_value(0),
        rotary_dim=width,
        enable_disaggregation=False,
        dtype=dtype,
        target=target,
    )
