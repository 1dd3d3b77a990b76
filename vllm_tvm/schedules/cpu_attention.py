"""The CPU kernel for ragged prefill attention (a prompt attending to itself), parallel and tiled.

Why: TVM 0.27's CPU kernel for it (`_attention_prefill_ragged_cpu`) runs on one thread, scores
every key of a row including the causally masked ones, keeps a [kv_len, heads] score buffer
per sequence and reduces the dot products one scalar at a time. Profiled on SmolLM2-135M, a
1,000-token prefill spent about 30% of its samples in that one function, and its cost grows
with the square of the prompt. A first replacement (one row per task, scalar `exp2f` per
key, one horizontal sum per dot product) still spent about 34 ns of CPU per (query, key,
head) at 2,000 tokens. This one is flash-attention shaped, at vector width throughout:

- a task owns a tile of query vectors (`TileShape`: query rows times the query heads that
  share one key/value head, so each key and value row loaded serves all of them) and one
  key/value head; tasks run on the worker pool (`T.parallel`), tile i paired with the tile
  as far from the end, so that under a causal mask every task has the same work;
- the tile's queries are stored transposed (one vector lane per query vector), so a key's
  scores for the whole tile are fused multiply-adds of the key's values broadcast against
  query columns, several keys at a time into independent registers: no horizontal sums;
- keys come KEY_BLOCK at a time with an online softmax (running maximum and denominator
  rescaled once per block), its exp2 the polynomial of schedules/vector_math.py, vectorised
  over the tile's lanes;
- the values are accumulated vectorised over the head dimension, several query vectors per
  pass so each value row loaded feeds several accumulators;
- scratch stays fixed-size and nothing grows with the context; a causal row scores only
  its visible keys, up to the end of the pass of keys that holds its last one.

RoPE is applied before attention by the cache (`RopeMode.NORMAL`); an inline-RoPE call
(`rotary_mode` 1) is refused by an assertion. `ReplaceCPURaggedPrefill` swaps the kernel into
a model's module on `llvm` targets when the head dimension is a multiple of LANES;
`replace_cpu_ragged_prefill(cap)` does so for a model whose attention scores are soft-capped
(Gemma 2: each score s becomes cap * tanh(s / cap), as compiler/attention_softcap.py does in
TVM's kernels).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm.script import tirx as T

from vllm_tvm.schedules import vector_math

KERNEL_NAME = "tir_attention_prefill_ragged_cpu"
"""The name TVM's paged KV cache gives its CPU ragged-prefill kernel when it builds it."""

KERNEL_SYMBOL = "batch_prefill_ragged_kv"
"""That kernel's global symbol, which is also its name in an exported model's module."""

QUERY_VECTORS = 96
"""Query vectors (query rows times the query heads of one key/value head) per tile at most:
six AVX-512 registers of scores per key. At 2,000 tokens of SmolLM2's shape, 96 with 64-key
blocks took ≈ 0.8x the CPU time of 48 with 32-key blocks (a run by hand on the loaded box)."""

TILE_QUERY_VALUES = 6144
"""fp32 values of a tile's queries at most (24 KiB, half an L1 data cache): fewer query
vectors for head dimensions above 64."""

VECTOR = 16
"""fp32 lanes of one AVX-512 register: the unit of every vector loop over query vectors."""

KEY_BLOCK = 64
"""Keys scored before the softmax state is rescaled."""

LANES = 8
"""The head dimension must be a whole number of AVX2 registers of fp32 (no remainder loop)."""

_STACK_BYTES = 1024
"""TVM keeps a CPU kernel's scratch buffer on the stack (in registers, once LLVM is done)
below this size and asks its workspace allocator for larger ones."""

LOG2E = math.log2(math.e)
"""Scores are kept in log2 units (exp2 is the cheaper exponential)."""

NO_SCORE = -5e4
"""The starting maximum, as in TVM's kernels (a score below it cannot occur in fp32 models)."""
_MASKED = -3e38
"""A masked score: far enough below any maximum that its weight is exactly 0."""


def as_f32(value: tvm.tirx.PrimExpr) -> tvm.tirx.PrimExpr:
    """`value` in fp32, where the kernels accumulate whatever the cache's dtype."""
    return T.Cast("float32", value)


def _key_row(
    first_key: tvm.tirx.PrimExpr, key: tvm.tirx.PrimExpr, visible: tvm.tirx.PrimExpr
) -> tvm.tirx.PrimExpr:
    """Row in the ragged key/value buffers of `key` of a sequence starting at `first_key`;
    keys past the `visible` ones (scored to fill a pass, their weights 0) read the last."""
    return first_key + T.min(key, visible - 1)


def soft_capped(score: tvm.tirx.PrimExpr, cap: float | None) -> tvm.tirx.PrimExpr:
    """`score` (in log2 units) soft-capped at `cap` (in natural units); unchanged for None."""
    if cap is None:
        return score
    scaled_cap = T.float32(cap * LOG2E)
    return scaled_cap * vector_math.tanh(score / scaled_cap)


@dataclass(frozen=True)
class TileShape:
    """How the kernel cuts its work for `group` query heads per key/value head.

    rows: query rows per tile; width: query vectors per tile (rows * group); lanes: width
    rounded up to whole vectors (the extra lanes score zeros and are never written); keys:
    keys scored per pass, each into its own registers; block_rows: query vectors whose
    value accumulators advance together. The per-pass scratch stays under _STACK_BYTES so
    that it lives in registers."""

    rows: int
    width: int
    lanes: int
    keys: int
    block_rows: int


def tile_shape(group: int, d: int) -> TileShape:
    """The tile for `group` query heads per key/value head of dimension `d`."""
    rows = max(1, min(QUERY_VECTORS, TILE_QUERY_VALUES // d) // group)
    lanes = math.ceil(rows * group / VECTOR) * VECTOR
    keys = next(n for n in (4, 2, 1) if n * lanes * 4 < _STACK_BYTES or n == 1)
    block_rows = next(
        r for r in (4, 3, 2, 1) if (lanes % r == 0 and r * d * 4 < _STACK_BYTES) or r == 1
    )
    return TileShape(rows, rows * group, lanes, keys, block_rows)


def ragged_prefill_cpu(
    h_kv: int, h_q: int, d: int, dtype: str, softcap: float | None = None
) -> tvm.tirx.PrimFunc:
    """The kernel for `h_q` query heads over `h_kv` key/value heads of dimension `d`, its
    scores soft-capped at `softcap` when set."""
    if d % LANES:
        raise ValueError(f"head dimension {d} is not a multiple of {LANES}")
    group = h_q // h_kv
    shape = tile_shape(group, d)
    rows, width, lanes = shape.rows, shape.width, shape.lanes
    keys, block_rows = shape.keys, shape.block_rows

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
        T.func_attr({"tirx.is_scheduled": True})
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
            q0 = T.Bind(q_indptr[b])
            kv0 = T.Bind(kv_indptr[b])
            n_q = T.Bind(q_indptr[b + 1] - q0)
            n_kv = T.Bind(kv_indptr[b + 1] - kv0)
            tiles = T.Bind(T.ceildiv(n_q, rows))
            # Task i takes query tile i and, causal work growing down the prompt, the tile as
            # far from the end: every task gets the same number of keys to score.
            for task in T.parallel(T.ceildiv(tiles, 2) * h_kv):
                with T.sblock("tile"):
                    T.reads()
                    T.writes()
                    queries = T.sblock_alloc_buffer((d, lanes), "float32")
                    scores = T.sblock_alloc_buffer((KEY_BLOCK, lanes), "float32")
                    acc = T.sblock_alloc_buffer((lanes, d), "float32")
                    limit = T.sblock_alloc_buffer((lanes,), "int32")
                    running_max = T.sblock_alloc_buffer((lanes,), "float32")
                    denominator = T.sblock_alloc_buffer((lanes,), "float32")
                    rescale = T.sblock_alloc_buffer((lanes,), "float32")
                    block_max = T.sblock_alloc_buffer((lanes,), "float32")
                    key_scores = T.sblock_alloc_buffer((keys, lanes), "float32")
                    row_acc = T.sblock_alloc_buffer((block_rows, d), "float32")
                    hk = T.Bind(task % h_kv)
                    pair = T.Bind(task // h_kv)
                    for half in T.serial(2):
                        tile = T.Bind(T.if_then_else(half == 0, pair, tiles - 1 - pair))
                        first = T.Bind(tile * rows)
                        # keys visible to the tile's last row
                        visible = T.Bind(
                            T.if_then_else(causal > 0, n_kv - n_q + T.min(n_q, first + rows), n_kv)
                        )
                        if half == 0 or tile > pair:
                            # the tile's queries, transposed (one lane per query vector) and
                            # pre-scaled so that scores come out in log2 units; lanes past
                            # the tile or the prompt score zeros and are never written
                            for c, m in T.grid(d, lanes):
                                queries[c, m] = T.if_then_else(
                                    m < width and first + m // group < n_q,
                                    as_f32(
                                        q[
                                            q0 + T.min(first + m // group, n_q - 1),
                                            hk * group + m % group,
                                            c,
                                        ]
                                    )
                                    * sm_scale
                                    * T.float32(LOG2E),
                                    T.float32(0),
                                )
                            for m in T.serial(lanes):
                                limit[m] = T.if_then_else(
                                    causal > 0,
                                    n_kv - n_q + T.min(first + m // group, n_q - 1) + 1,
                                    n_kv,
                                )
                                running_max[m] = T.float32(NO_SCORE)
                                denominator[m] = T.float32(0)
                            for m, c in T.grid(lanes, d):
                                acc[m, c] = T.float32(0)
                            for block in T.serial(T.ceildiv(visible, KEY_BLOCK)):
                                start = T.Bind(block * KEY_BLOCK)
                                # keys scored: those visible, rounded up to whole passes
                                scored = T.Bind(
                                    T.ceildiv(T.min(KEY_BLOCK, visible - start), keys) * keys
                                )
                                for jo in T.serial(T.ceildiv(scored, keys)):
                                    for ji, mo in T.grid(keys, lanes // VECTOR):
                                        for mi in T.vectorized(VECTOR):
                                            key_scores[ji, mo * VECTOR + mi] = T.float32(0)
                                    for c in T.serial(d):
                                        for ji in T.unroll(keys):
                                            for mo in T.unroll(lanes // VECTOR):
                                                for mi in T.vectorized(VECTOR):
                                                    key_scores[ji, mo * VECTOR + mi] += (
                                                        as_f32(
                                                            k[
                                                                _key_row(
                                                                    kv0,
                                                                    start + jo * keys + ji,
                                                                    visible,
                                                                ),
                                                                hk,
                                                                c,
                                                            ]
                                                        )
                                                        * queries[c, mo * VECTOR + mi]
                                                    )
                                    for ji, mo in T.grid(keys, lanes // VECTOR):
                                        for mi in T.vectorized(VECTOR):
                                            scores[jo * keys + ji, mo * VECTOR + mi] = T.Select(
                                                start + jo * keys + ji < limit[mo * VECTOR + mi],
                                                soft_capped(
                                                    key_scores[ji, mo * VECTOR + mi], softcap
                                                ),
                                                T.float32(_MASKED),
                                            )
                                for mo in T.unroll(lanes // VECTOR):
                                    for mi in T.vectorized(VECTOR):
                                        block_max[mo * VECTOR + mi] = running_max[mo * VECTOR + mi]
                                for j in T.serial(scored):
                                    for mo in T.unroll(lanes // VECTOR):
                                        for mi in T.vectorized(VECTOR):
                                            block_max[mo * VECTOR + mi] = T.max(
                                                block_max[mo * VECTOR + mi],
                                                scores[j, mo * VECTOR + mi],
                                            )
                                for mo in T.unroll(lanes // VECTOR):
                                    for mi in T.vectorized(VECTOR):
                                        rescale[mo * VECTOR + mi] = vector_math.exp2(
                                            running_max[mo * VECTOR + mi]
                                            - block_max[mo * VECTOR + mi]
                                        )
                                        running_max[mo * VECTOR + mi] = block_max[mo * VECTOR + mi]
                                        denominator[mo * VECTOR + mi] = (
                                            denominator[mo * VECTOR + mi]
                                            * rescale[mo * VECTOR + mi]
                                        )
                                for j in T.serial(scored):
                                    for mo in T.unroll(lanes // VECTOR):
                                        for mi in T.vectorized(VECTOR):
                                            scores[j, mo * VECTOR + mi] = vector_math.exp2(
                                                scores[j, mo * VECTOR + mi]
                                                - running_max[mo * VECTOR + mi]
                                            )
                                            denominator[mo * VECTOR + mi] = (
                                                denominator[mo * VECTOR + mi]
                                                + scores[j, mo * VECTOR + mi]
                                            )
                                for mo in T.serial(lanes // block_rows):
                                    for mi in T.unroll(block_rows):
                                        for c in T.vectorized(d):
                                            row_acc[mi, c] = (
                                                acc[mo * block_rows + mi, c]
                                                * rescale[mo * block_rows + mi]
                                            )
                                    for j in T.serial(scored):
                                        for mi in T.unroll(block_rows):
                                            for c in T.vectorized(d):
                                                row_acc[mi, c] += scores[
                                                    j, mo * block_rows + mi
                                                ] * as_f32(
                                                    v[_key_row(kv0, start + j, visible), hk, c]
                                                )
                                    for mi in T.unroll(block_rows):
                                        for c in T.vectorized(d):
                                            acc[mo * block_rows + mi, c] = row_acc[mi, c]
                            for m in T.serial(width):
                                if first + m // group < n_q:
                                    for c in T.vectorized(d):
                                        output[
                                            q0 + first + m // group, hk * group + m % group, c
                                        ] = T.Cast(dtype, acc[m, c] / denominator[m])
                                    lse[q0 + first + m // group, hk * group + m % group] = (
                                        running_max[m] + T.log2(denominator[m])
                                    )

    return batch_prefill_ragged_kv


def swap_kernel(
    mod: tvm.IRModule,
    symbol: str,
    build: Callable[[tvm.tirx.PrimFunc], tvm.tirx.PrimFunc | None],
) -> tvm.IRModule:
    """`mod` with its PrimFunc of global symbol `symbol` replaced by `build(that function)`,
    the replacement keeping its attributes; `mod` itself where there is none or `build`
    returns None (shapes it does not handle).

    A kernel is found by its global symbol: an exported model's module names it after the
    symbol, TVM's KV-cache builder after its own name (KERNEL_NAME for ragged prefill)."""
    found = [
        gv
        for gv, func in mod.functions_items()
        if isinstance(func, tvm.tirx.PrimFunc)
        and str((func.attrs or {}).get("global_symbol", "")) == symbol
    ]
    if not found:
        return mod
    (global_var,) = found
    stock = mod[global_var]
    kernel = build(stock)
    if kernel is None:
        return mod
    for key, value in (stock.attrs or {}).items():
        kernel = kernel.with_attr(key, value)
    updated = mod.clone()
    updated.update_func(updated.get_global_var(global_var.name_hint), kernel)
    return updated


def _ragged_prefill_for(
    stock: tvm.tirx.PrimFunc, softcap: float | None
) -> tvm.tirx.PrimFunc | None:
    """`ragged_prefill_cpu` for the shapes of TVM's kernel `stock`, None where unsupported."""
    q, k, v = stock.params[0], stock.params[2], stock.params[3]  # buffers, by signature
    h_q, d = int(q.shape[1]), int(q.shape[2])
    h_kv, d_v = int(k.shape[1]), int(v.shape[2])
    if d % LANES or d != d_v:
        return None
    return ragged_prefill_cpu(h_kv, h_q, d, str(q.dtype), softcap)


def _swap_ragged_prefill(mod: tvm.IRModule, softcap: float | None) -> tvm.IRModule:
    """Swap TVM's CPU ragged-prefill kernel for `ragged_prefill_cpu` where the shapes allow."""
    return swap_kernel(mod, KERNEL_SYMBOL, lambda stock: _ragged_prefill_for(stock, softcap))


def replace_cpu_ragged_prefill(softcap: float | None = None) -> tvm.transform.Pass:
    """The swap as a pass, the kernel's scores soft-capped at `softcap` when set."""
    return tvm.transform.module_pass(
        lambda mod, _ctx: _swap_ragged_prefill(mod, softcap),
        opt_level=0,
        name="ReplaceCPURaggedPrefill",
    )


ReplaceCPURaggedPrefill = replace_cpu_ragged_prefill()
"""The swap for models whose attention scores are not soft-capped."""
