"""RoPE applied by the model itself, where TVM's KV cache cannot apply it exactly.

Why: the paged KV cache rotates q/k with built-in formulas (rope_scaling.py says which ones
match transformers) and with one base frequency for all layers. For yarn and longrope, and
for models whose sliding layers use another RoPE base (Gemma 3), the frequencies come from
rope_scaling.py (per layer) and the rotation happens here, on the fused qkv, before the
cache (created with `RopeMode.NONE`) stores k. Positions are the cache's own query
positions, so chunked prefill, batching and prefix caching see the same positions as with
the cache's rotation. The rotation is transformers' `rotate_half` form over the first
`rotary_dim` channels.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache


def _rotate(
    qkv: te.Tensor,
    positions: te.Tensor,
    inv_freq: te.Tensor,
    rotating_heads: int,
    cos_sin_factor: float,
) -> te.Tensor:
    """qkv [b, s, heads, d] with the first `rotating_heads` heads (q, then k) rotated."""
    _, seq_len, _, head_dim = qkv.shape
    half = inv_freq.shape[0]

    def element(b: tirx.Var, s: tirx.Var, h: tirx.Var, d: tirx.Var) -> tirx.PrimExpr:
        value = qkv[b, s, h, d]
        position = positions[b * seq_len + s].astype("float32")
        angle = position * inv_freq[tirx.floormod(d, half)]
        partner = tirx.if_then_else(
            d < half,
            -qkv[b, s, h, tirx.min(d + half, head_dim - 1)],
            qkv[b, s, h, tirx.max(d - half, 0)],
        )
        rotated = (
            tirx.cos(angle) * cos_sin_factor * value.astype("float32")
            + tirx.sin(angle) * cos_sin_factor * partner.astype("float32")
        ).astype(qkv.dtype)
        return tirx.if_then_else(tirx.all(h < rotating_heads, d < 2 * half), rotated, value)

    return te.compute(qkv.shape, element, name="rotary_embedding")


def apply_rotary(
    qkv: Tensor,
    kv_cache: PagedKVCache,
    inv_freq: np.ndarray,
    cos_sin_factor: float,
    rotating_heads: int,
) -> Tensor:
    """Rotate the q and k heads of `qkv` [b, s, heads, head_dim] at the cache's positions."""
    batch, seq_len, _, _ = qkv.shape
    positions = kv_cache.get_query_positions(batch * seq_len)
    return rotate_at(qkv, positions, inv_freq, cos_sin_factor, rotating_heads)


def rotate_at(
    qkv: Tensor,
    positions: Tensor,
    inv_freq: np.ndarray,
    cos_sin_factor: float,
    rotating_heads: int,
) -> Tensor:
    """Rotate the first `rotating_heads` heads of `qkv` [b, s, heads, head_dim] at
    `positions` [b * s]."""
    return op.tensor_expr_op(
        lambda x, pos, freq: _rotate(x, pos, freq, rotating_heads, cos_sin_factor),
        "rotary_embedding",
        [qkv, positions, Tensor.from_const(inv_freq)],
    )
