"""The CPU kernel for ragged prefill attention (a prompt attending to itself), parallel and tiled.

Why: TVM 0.27's CPU kernel for it (`_attention_prefill_ragged_cpu`) runs on one thread, scores
every key of a row including the causally masked ones, keeps a [kv_len, heads] score buffer
per sequence and reduces the dot products one scalar at a time. Profiled on SmolLM2-135M, a
1,000-token prefill spent about 30% of its samples in that one function (the matmuls, on every
core, took about 36%), and its cost grows with the square of the prompt: it is why prefill grew
super-linearly. Here, with the same signature and results:

- the query rows of a sequence are split over the worker pool (`T.parallel`);
- a row visits only the keys its causal mask admits, TILE keys at a time, with an online
  softmax (running maximum and denominator rescaled once per tile), so its scratch is a few
  fixed-size registers-worth buffers and nothing grows with the context;
- dot products keep LANES partial sums (one vector register) and the value accumulation is
  vectorised over the head dimension.

RoPE is applied before attention by the cache (`RopeMode.NORMAL`); an inline-RoPE call
(`rotary_mode` 1) is refused by an assertion. `ReplaceCPURaggedPrefill` swaps the kernel into
a model's module on `llvm` targets when the head dimension is a multiple of LANES;
`replace_cpu_ragged_prefill(cap)` does so for a model whose attention scores are soft-capped
(Gemma 2: each score s becomes cap * tanh(s / cap), as compiler/attention_softcap.py does in
TVM's kernels).
"""

from __future__ import annotations

import math

import tvm
from tvm.script import tirx as T

KERNEL_NAME = "tir_attention_prefill_ragged_cpu"
"""The name TVM's paged KV cache gives its CPU ragged-prefill kernel when it builds it."""

KERNEL_SYMBOL = "batch_prefill_ragged_kv"
"""That kernel's global symbol, which is also its name in an exported model's module."""

TILE = 32
"""Keys scored before the softmax state is rescaled."""

LANES = 8
"""Partial sums of a dot product: one AVX2 register of fp32."""

_LOG2E = math.log2(math.e)
_NO_SCORE = -5e4
"""The starting maximum, as in TVM's kernel (a score below it cannot occur in fp32 models)."""


def _f32(value: tvm.tirx.PrimExpr) -> tvm.tirx.PrimExpr:
    return T.Cast("float32", value)


def _key_row(
    kv_indptr: tvm.tirx.Buffer, b: tvm.tirx.Var, tile: tvm.tirx.Var, j: tvm.tirx.Var
) -> tvm.tirx.PrimExpr:
    """Row in the ragged key/value buffers of key `j` of `tile` of sequence `b`."""
    return kv_indptr[b] + tile * TILE + j


def _soft_capped(score: tvm.tirx.PrimExpr, cap: float | None) -> tvm.tirx.PrimExpr:
    """`score` (in log2 units) soft-capped at `cap` (in natural units); unchanged for None."""
    if cap is None:
        return score
    scaled_cap = T.float32(cap * _LOG2E)
    return scaled_cap * T.tanh(score / scaled_cap)


def ragged_prefill_cpu(
    h_kv: int, h_q: int, d: int, dtype: str, softcap: float | None = None
) -> tvm.tirx.PrimFunc:
    """The kernel for `h_q` query heads over `h_kv` key/value heads of dimension `d`, its
    scores soft-capped at `softcap` when set."""
    if d % LANES:
        raise ValueError(f"head dimension {d} is not a multiple of {LANES}")
    group = h_q // h_kv

    @T.prim_func(s_tir=True)
    def batch_prefill_ragged_kv(
        var_q: T.handle,
        var_q_indptr: T.handle,
        var_k: T.handle,
        var_v: T.handle,
        var_kv_indptr: T.handle,
        var_q_rope_position: T.handle,
        var_k_rope_pos_offset: T.handle,
        var_output: T.handle,
        var_lse: T.handle,
        causal: T.int32,
        rotary_mode: T.int32,
        rope_scale: T.float32,
        rope_theta: T.float32,
        sm_scale: T.float32,
    ):
        T.func_attr({"tir.is_scheduled": True})
        batch_size, qo_len, kv_len = T.int32(), T.int32(), T.int32()
        q_off, kv_off, pos_off, rope_off = T.int32(), T.int32(), T.int32(), T.int32()
        q = T.match_buffer(var_q, (qo_len, h_q, d), dtype)
        q_indptr = T.match_buffer(var_q_indptr, (batch_size + 1,), "int32", elem_offset=q_off)
        k = T.match_buffer(var_k, (kv_len, h_kv, d), dtype)
        v = T.match_buffer(var_v, (kv_len, h_kv, d), dtype)
        kv_indptr = T.match_buffer(var_kv_indptr, (batch_size + 1,), "int32", elem_offset=kv_off)
        T.match_buffer(var_q_rope_position, (qo_len,), "int32", elem_offset=pos_off)
        T.match_buffer(var_k_rope_pos_offset, (batch_size,), "int32", elem_offset=rope_off)
        output = T.match_buffer(var_output, (qo_len, h_q, d), dtype)
        lse = T.match_buffer(var_lse, (qo_len, h_q), "float32")
        assert rotary_mode == 0, "this CPU prefill kernel expects RoPE applied before attention"

        for b in T.serial(batch_size):
            for row in T.parallel(q_indptr[b + 1] - q_indptr[b]):
                with T.sblock("row"):
                    scores = T.sblock_alloc_buffer((TILE,), "float32", scope="local")
                    lanes = T.sblock_alloc_buffer((LANES,), "float32", scope="local")
                    acc = T.sblock_alloc_buffer((d,), "float32", scope="local")
                    # running maximum, denominator, this tile's maximum, one dot product
                    state = T.sblock_alloc_buffer((4,), "float32", scope="local")
                    visible = T.sblock_alloc_buffer((1,), "int32", scope="local")
                    visible[0] = T.if_then_else(
                        causal > 0,
                        kv_indptr[b + 1] - kv_indptr[b] - (q_indptr[b + 1] - q_indptr[b]) + row + 1,
                        kv_indptr[b + 1] - kv_indptr[b],
                    )
                    for h in T.serial(h_q):
                        state[0] = T.float32(_NO_SCORE)
                        state[1] = T.float32(0)
                        for i in T.vectorized(d):
                            acc[i] = T.float32(0)
                        for tile in T.serial(T.ceildiv(visible[0], TILE)):
                            state[2] = T.float32(_NO_SCORE)
                            for j in T.serial(TILE):
                                if tile * TILE + j < visible[0]:
                                    for lane in T.vectorized(LANES):
                                        lanes[lane] = T.float32(0)
                                    for chunk in T.serial(d // LANES):
                                        for lane in T.vectorized(LANES):
                                            lanes[lane] += _f32(
                                                q[q_indptr[b] + row, h, chunk * LANES + lane]
                                            ) * _f32(
                                                k[
                                                    _key_row(kv_indptr, b, tile, j),
                                                    h // group,
                                                    chunk * LANES + lane,
                                                ]
                                            )
                                    state[3] = T.float32(0)
                                    for lane in T.unroll(LANES):
                                        state[3] += lanes[lane]
                                    scores[j] = _soft_capped(
                                        state[3] * T.float32(_LOG2E) * sm_scale, softcap
                                    )
                                    state[2] = T.max(state[2], scores[j])
                            state[2] = T.max(state[0], state[2])  # the new running maximum
                            state[1] = state[1] * T.exp2(state[0] - state[2])
                            for i in T.vectorized(d):
                                acc[i] = acc[i] * T.exp2(state[0] - state[2])
                            state[0] = state[2]
                            for j in T.serial(TILE):
                                if tile * TILE + j < visible[0]:
                                    scores[j] = T.exp2(scores[j] - state[0])
                                    state[1] += scores[j]
                                    for i in T.vectorized(d):
                                        acc[i] += scores[j] * _f32(
                                            v[_key_row(kv_indptr, b, tile, j), h // group, i]
                                        )
                        for i in T.vectorized(d):
                            output[q_indptr[b] + row, h, i] = T.Cast(dtype, acc[i] / state[1])
                        lse[q_indptr[b] + row, h] = state[0] + T.log2(state[1])

    return batch_prefill_ragged_kv


def _swap_ragged_prefill(mod: tvm.IRModule, softcap: float | None) -> tvm.IRModule:
    """Swap TVM's CPU ragged-prefill kernel for `ragged_prefill_cpu` where the shapes allow.

    The kernel is found by its global symbol: an exported model's module names it after the
    symbol, TVM's KV-cache builder after KERNEL_NAME."""
    found = [
        gv
        for gv, func in mod.functions_items()
        if isinstance(func, tvm.tirx.PrimFunc)
        and str((func.attrs or {}).get("global_symbol", "")) == KERNEL_SYMBOL
    ]
    if not found:
        return mod
    (global_var,) = found
    stock = mod[global_var]
    q, k, v = stock.params[0], stock.params[2], stock.params[3]  # buffers, by signature
    h_q, d = int(q.shape[1]), int(q.shape[2])
    h_kv, d_v = int(k.shape[1]), int(v.shape[2])
    if d % LANES or d != d_v:
        return mod
    kernel = ragged_prefill_cpu(h_kv, h_q, d, str(q.dtype), softcap)
    for key, value in (stock.attrs or {}).items():
        kernel = kernel.with_attr(key, value)
    updated = mod.clone()
    updated.update_func(updated.get_global_var(global_var.name_hint), kernel)
    return updated


def replace_cpu_ragged_prefill(softcap: float | None = None) -> tvm.transform.Pass:
    """The swap as a pass, the kernel's scores soft-capped at `softcap` when set."""
    return tvm.transform.module_pass(
        lambda mod, _ctx: _swap_ragged_prefill(mod, softcap),
        opt_level=0,
        name="ReplaceCPURaggedPrefill",
    )


ReplaceCPURaggedPrefill = replace_cpu_ragged_prefill()
"""The swap for models whose attention scores are not soft-capped."""
