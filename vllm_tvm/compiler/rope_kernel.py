"""The paged KV cache's split-and-rotate kernel, with each angle computed once per position.

Why: TVM's KV cache splits the fused q/k/v projection and applies RoPE in one kernel
(`llama_rope_with_position_map`, block `llama_fused_rope`) that gives every element its own
thread and evaluates the rotation angle's power, cosine and sine for each of them: 40 times
per (token, feature) on the Llama-3.1-8B shape, once per rotated head. On the H200 that
kernel took 0.70 ms of a 1,024-token prefill (21 µs a layer, about 4x what moving its bytes
takes): it is bound by that math, not by memory.

Here one thread owns one (token, feature) pair: it computes the angle's cosine and sine once,
with the same frequency expression as TVM's kernel (TVM's `switch_rope_freq_func`, so every
RoPE scaling TVM supports gives the same angles), then walks the heads, rotating the query and
key heads and copying the value heads. Per element the arithmetic is the same expression as
before, so the outputs are the same values.

Only CUDA libraries get it (CPU kernels are compiled for throughput differently), and only
where TVM added its plain kernel: the LongRoPE variant (its own signature and per-feature
factors) and latent-attention caches keep TVM's.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.relax.frontend.nn.llm.position_embedding import (
    llama_rope_with_position_map,
    switch_rope_freq_func,
)
from tvm.script import tirx as T

ROPE_BLOCK = "rope_by_position"
_TVM_ROPE_PARAMS = 6  # qkv, position_map, q, k, v, apply_rope


def rope_by_position(
    theta: float,
    scale: float,
    head_dim: int,
    num_q_heads: int,
    num_kv_heads: int,
    dtype: str,
    rope_scaling: dict[str, Any],
    rotary_dim: int,
) -> tirx.PrimFunc:
    """The kernel, unscheduled: loops (token, feature), heads inside. Same signature and
    outputs as TVM's `llama_rope_with_position_map(...)` for these arguments."""
    fused_heads = num_q_heads + 2 * num_kv_heads
    freq = switch_rope_freq_func(rope_scaling)
    gptj = rope_scaling.get("rope_type") == "gptj"
    half = rotary_dim // 2
    scale_f32 = tirx.const(scale, "float32")

    def angle(pos: tirx.Expr, d: tirx.Var) -> tuple[tirx.Expr, tirx.Expr]:
        cos, sin, bindings = freq(pos * scale_f32, d, rotary_dim, theta, "float32")
        for var, value in bindings.items():
            cos, sin = tirx.Let(var, value, cos), tirx.Let(var, value, sin)
        return cos, sin

    def partner(qkv: T.Buffer, s: tirx.Var, h: tirx.Var, d: tirx.Var) -> tirx.Expr:
        """The element a rotation pairs with (negated for the first of each pair)."""
        if gptj:
            value = tirx.if_then_else(d % 2 == 0, -qkv[s, h, d + 1], qkv[s, h, d - 1])
        else:
            value = tirx.if_then_else(d < half, -qkv[s, h, d + half], qkv[s, h, d - half])
        return value.astype("float32")

    def rotated(qkv: T.Buffer, cos_sin: T.Buffer, s, h, d, apply_rope) -> tirx.Expr:
        turned = cos_sin[0] * qkv[s, h, d].astype("float32") + cos_sin[1] * partner(qkv, s, h, d)
        return tirx.if_then_else(
            tirx.all(apply_rope > 0, d < rotary_dim), turned.astype(dtype), qkv[s, h, d]
        )

    @T.prim_func(private=True, s_tir=True)
    def kernel(
        var_qkv: T.handle,
        var_position_map: T.handle,
        var_q: T.handle,
        var_k: T.handle,
        var_v: T.handle,
        apply_rope: T.int64,
    ):
        T.func_attr({"op_pattern": 8, "tirx.noalias": True})
        seq_len = T.int32()
        position_map_elem_offset = T.int32()
        qkv = T.match_buffer(var_qkv, (seq_len, fused_heads, head_dim), dtype)
        q = T.match_buffer(var_q, (seq_len, num_q_heads, head_dim), dtype)
        k = T.match_buffer(var_k, (seq_len, num_kv_heads, head_dim), dtype)
        v = T.match_buffer(var_v, (seq_len, num_kv_heads, head_dim), dtype)
        position_map = T.match_buffer(
            var_position_map, (seq_len,), "int32", elem_offset=position_map_elem_offset
        )
        for token, feature in T.grid(seq_len, head_dim):
            with T.sblock(ROPE_BLOCK):
                s, d = T.axis.remap("SS", [token, feature])
                cos_sin = T.sblock_alloc_buffer((2,), "float32", scope="local")
                cos_sin[0] = angle(position_map[s], d)[0]
                cos_sin[1] = angle(position_map[s], d)[1]
                for h in range(fused_heads):
                    if h < num_q_heads:
                        q[s, h, d] = rotated(qkv, cos_sin, s, h, d, apply_rope)
                    elif h < num_q_heads + num_kv_heads:
                        k[s, h - num_q_heads, d] = rotated(qkv, cos_sin, s, h, d, apply_rope)
                    else:
                        v[s, h - num_q_heads - num_kv_heads, d] = qkv[s, h, d]

    return kernel


def schedule_for_gpu(kernel: tirx.PrimFunc) -> tirx.PrimFunc:
    """A block of threads per token, a thread per feature (coalesced along the head)."""
    sch = s_tir.Schedule(kernel)
    token, feature = sch.get_loops(sch.get_sblock(ROPE_BLOCK))
    sch.bind(token, "blockIdx.x")
    sch.bind(feature, "threadIdx.x")
    return sch.mod["main"].with_attr("tirx.is_scheduled", True)


def replace_rope_kernel(
    mod: tvm.IRModule, rope: dict[str, Any], heads: tuple[int, int], head_dim: int, dtype: str
) -> tvm.IRModule:
    """`mod` with TVM's plain rope kernel replaced by `rope_by_position`, scheduled for the
    GPU. `rope` is the model's `cache_rope()`, `heads` its `cache_heads()`. A function is
    replaced only when it is exactly the kernel TVM builds for these arguments (structurally
    equal), so a cache built with other rope arguments keeps its own."""
    args = (
        float(rope["rope_theta"]),
        float(rope["rope_scale"]),
        head_dim,
        heads[0],
        heads[1],
        dtype,
        dict(rope["rope_scaling"]),
        int(rope["rotary_dim"]),
    )
    tvm_kernel = llama_rope_with_position_map(*args)
    if len(tvm_kernel.params) != _TVM_ROPE_PARAMS:
        return mod  # LongRoPE: TVM's variant takes its factors as a seventh argument
    ours = schedule_for_gpu(rope_by_position(*args))
    for global_var, func in list(mod.functions.items()):
        if not isinstance(func, tirx.PrimFunc) or len(func.params) != _TVM_ROPE_PARAMS:
            continue
        if tvm_ffi.structural_equal(func, tvm_kernel):
            mod[global_var] = ours.with_attr("global_symbol", func.attrs["global_symbol"])
    return mod
