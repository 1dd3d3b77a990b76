"""Rotary position embedding applied inside the model, for layers whose RoPE the KV cache
cannot apply.

Why: TVM's paged KV cache rotates queries and keys with one base frequency for all layers.
Gemma 3 uses one base for its full-attention layers and another for its sliding layers, so
such a model runs the cache without RoPE (`RopeMode.NONE`) and rotates q and k here, per
layer, at the in-sequence positions the cache reports. The arithmetic follows transformers'
default/linear RoPE: fp32 inverse frequencies `1 / theta ** (2j / d)` (divided by the linear
factor), rotate-half pairing.
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.relax.frontend.nn import Tensor, op


def apply_rotary(x: Tensor, positions: Tensor, theta: float, linear_factor: float) -> Tensor:
    """`x` [batch, seq, heads, head_dim] rotated at `positions` [batch * seq] (int32)."""

    def compute(data: te.Tensor, pos: te.Tensor) -> te.Tensor:
        _, seq_len, _, head_dim = data.shape
        half = head_dim // 2

        def rotated(b, s, h, d):
            j = tirx.floormod(d, half)
            exponent = (2 * j).astype("float32") / tirx.const(int(head_dim), "float32")
            inv_freq = tirx.const(1.0, "float32") / tirx.power(
                tirx.const(theta, "float32"), exponent
            )
            inv_freq = inv_freq / tirx.const(linear_factor, "float32")
            angle = pos[b * seq_len + s].astype("float32") * inv_freq
            value = data[b, s, h, d].astype("float32")
            partner = tirx.if_then_else(
                d < half, -data[b, s, h, d + half], data[b, s, h, d - half]
            ).astype("float32")
            return (value * tirx.cos(angle) + partner * tirx.sin(angle)).astype(data.dtype)

        return te.compute(data.shape, rotated, name="rotary")

    return op.tensor_expr_op(compute, "rotary", [x, positions])
