"""The CPU kernel for the KV cache's RoPE split (`tir_split_rotary`): parallel over tokens,
each angle's cosine and sine computed once per token.

Why: TVM 0.27's kernel (`llama_rope_with_position_map`) runs on one thread and evaluates
`pow`, `cos` and `sin` (scalar library calls) for every element of every query and key
head, so a Qwen2.5-0.5B-shaped 512-token prefill (14 + 2 heads of 64) spent ≈ 5 ms a layer
in it, about half of what the profile counts as attention
(benchmarks/results/cpu_prefill_profile_2026-12-04/). Here each token is one task on the
worker pool; its `rotary_dim` angles are evaluated once into a small table, with the very
expressions TVM's kernel uses (`switch_rope_freq_func`, so every RoPE scaling it supports),
and then applied to all heads in vector loops over the head dimension. Each output element
is the same arithmetic as TVM's (test_cpu_rope.py: against TVM's kernel and float64).

Long-RoPE (a per-dimension factor buffer, another signature) and GPT-J's interleaved pairs
keep TVM's kernel.
`cpu_rope_kernels(target)` puts this factory in place of TVM's while an llvm model exports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import tvm
from tvm import tirx
from tvm.relax.frontend.nn.llm import kv_cache
from tvm.relax.frontend.nn.llm.position_embedding import (
    llama_rope_with_position_map,
    switch_rope_freq_func,
)
from tvm.script import tirx as T

FACTORY = "llama_rope_with_position_map"
"""The name under which TVM's KV cache looks up its RoPE kernel factory."""


def _angle(
    frequencies: Callable[..., Any],
    part: int,
    position: tirx.PrimExpr,
    d: tirx.PrimExpr,
    rotary_dim: int,
    theta: float,
) -> tirx.PrimExpr:
    """The cosine (`part` 0) or sine (1) TVM's kernel multiplies dimension `d` by at
    `position` (already scaled), with the bindings its frequency function asks for."""
    cos_freq, sin_freq, bindings = frequencies(position, d, rotary_dim, theta, "float32")
    expr = (cos_freq, sin_freq)[part]
    for var, value in bindings.items():
        expr = tirx.Let(var, value, expr)
    return expr


def rope_cpu(
    theta: float,
    scale: float,
    head_dim: int,
    num_q_heads: int,
    num_kv_heads: int,
    dtype: str,
    rope_scaling: dict[str, Any],
    rotary_dim: int | None = None,
) -> tirx.PrimFunc:
    """The kernel TVM's factory of the same arguments builds, parallel and vectorised."""
    if rope_scaling.get("rope_type") in ("longrope", "gptj"):
        args = (theta, scale, head_dim, num_q_heads, num_kv_heads, dtype, rope_scaling)
        return llama_rope_with_position_map(*args, rotary_dim)
    rotary = head_dim if rotary_dim is None else rotary_dim
    half = rotary // 2
    frequencies = switch_rope_freq_func(rope_scaling)
    rope_scale = tirx.const(scale, "float32")
    fused_heads = num_q_heads + 2 * num_kv_heads

    def rotated(x, cos, sin, partner, apply_rope):
        """TVM's `_rope` of element `x` and its rotation `partner` (negated for the first
        half) with the angle's cosine and sine; `x` itself when RoPE is off."""
        value = cos * x.astype("float32") + sin * partner.astype("float32")
        return T.if_then_else(apply_rope > 0, value.astype(dtype), x)

    @T.prim_func(s_tir=True)
    def cpu_fused_rope(
        var_qkv: T.handle,
        var_position_map: T.handle,
        var_q: T.handle,
        var_k: T.handle,
        var_v: T.handle,
        apply_rope: T.int64,
    ):
        T.func_attr({"op_pattern": 8, "tirx.noalias": True, "tirx.is_scheduled": True})
        seq_len = T.int32()
        position_map_elem_offset = T.int32()
        qkv = T.match_buffer(var_qkv, (seq_len, fused_heads, head_dim), dtype)
        q = T.match_buffer(var_q, (seq_len, num_q_heads, head_dim), dtype)
        k = T.match_buffer(var_k, (seq_len, num_kv_heads, head_dim), dtype)
        v = T.match_buffer(var_v, (seq_len, num_kv_heads, head_dim), dtype)
        position_map = T.match_buffer(
            var_position_map, (seq_len,), "int32", elem_offset=position_map_elem_offset
        )
        for s in T.parallel(seq_len):
            with T.sblock("token"):
                T.reads()
                T.writes()
                cos = T.sblock_alloc_buffer((rotary,), "float32")
                sin = T.sblock_alloc_buffer((rotary,), "float32")
                for d in T.serial(rotary):
                    position = position_map[s] * rope_scale
                    cos[d] = _angle(frequencies, 0, position, d, rotary, theta)
                    sin[d] = _angle(frequencies, 1, position, d, rotary, theta)
                for h in T.serial(num_q_heads):
                    for d in T.vectorized(half):
                        q[s, h, d] = rotated(
                            qkv[s, h, d], cos[d], sin[d], -qkv[s, h, d + half], apply_rope
                        )
                    for d in T.vectorized(half):
                        q[s, h, half + d] = rotated(
                            qkv[s, h, half + d],
                            cos[half + d],
                            sin[half + d],
                            qkv[s, h, d],
                            apply_rope,
                        )
                    if head_dim > rotary:
                        for d in T.vectorized(head_dim - rotary):
                            q[s, h, rotary + d] = qkv[s, h, rotary + d]
                for h in T.serial(num_kv_heads):
                    for d in T.vectorized(half):
                        k[s, h, d] = rotated(
                            qkv[s, num_q_heads + h, d],
                            cos[d],
                            sin[d],
                            -qkv[s, num_q_heads + h, d + half],
                            apply_rope,
                        )
                    for d in T.vectorized(half):
                        k[s, h, half + d] = rotated(
                            qkv[s, num_q_heads + h, half + d],
                            cos[half + d],
                            sin[half + d],
                            qkv[s, num_q_heads + h, d],
                            apply_rope,
                        )
                    if head_dim > rotary:
                        for d in T.vectorized(head_dim - rotary):
                            k[s, h, rotary + d] = qkv[s, num_q_heads + h, rotary + d]
                    for d in T.vectorized(head_dim):
                        v[s, h, d] = qkv[s, num_q_heads + num_kv_heads + h, d]

    return cpu_fused_rope


@contextlib.contextmanager
def cpu_rope_kernels(target: tvm.target.Target) -> Iterator[None]:
    """Within the block, TVM's KV cache builds `rope_cpu`'s kernel for an llvm `target`
    (nothing changes for other targets); TVM's factory is back afterwards."""
    if target.kind.name != "llvm":
        yield
        return
    original = getattr(kv_cache, FACTORY)
    try:
        setattr(kv_cache, FACTORY, rope_cpu)
        yield
    finally:
        setattr(kv_cache, FACTORY, original)
