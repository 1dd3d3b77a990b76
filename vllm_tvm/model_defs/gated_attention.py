"""The full-attention layer of Qwen3-Next and Qwen3.5/3.6 hybrids, and their RMSNorm.

What differs from Llama-family attention (transformers' `Qwen3NextAttention` /
`Qwen3_5Attention`):

- an output gate: `q_proj` yields, per query head, the head's query and then its gate
  (2 * head_dim rows a head); the attention output is multiplied by sigmoid(gate) before
  `o_proj`;
- q and k pass a per-head zero-centred RMSNorm;
- partial rotary: only the first `rotary_dim` (head_dim * partial_rotary_factor) channels
  rotate, rotate-half style, which the paged KV cache applies (`cache_rope`). Qwen3.5's
  multimodal RoPE sections see one position per text token on all three axes, which is
  plain RoPE.

Zero-centred RMSNorm (`Qwen3NextRMSNorm` / `Qwen3_5RMSNorm`): checkpoints store w - 1 and
the norm multiplies by 1 + w, in fp32 before the cast back (what `OffsetRMSNorm` with
offset 1 computes in the model dtype; here the whole product stays fp32, as transformers
keeps it).

Weights: q_proj (with its gates), k_proj and v_proj are one `qkv_proj` matrix, fused at
load like the Llama family's (llama.fused_weight_sources), so a step runs one GEMV.
`layer_id` is the layer's index among the model's full-attention layers: the paged KV
cache holds only those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache, RopeMode

from vllm_tvm.model_defs.layers import NTLinear
from vllm_tvm.model_defs.rotary import SectionedPositions, rotate_by_model

NORM_DTYPE = "float32"


@dataclass(frozen=True)
class GatedAttentionOptions:
    """The shape of one gated full-attention layer (HF names: `from_hf_config`)."""

    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int
    rope_theta: float
    rms_norm_eps: float
    bias: bool

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> GatedAttentionOptions:
        """From a Qwen3-Next / Qwen3.5 text config (RoPE in `rope_parameters` or top level)."""
        rope = config.get("rope_parameters") or config
        rope_type = rope.get("rope_type", "default")
        if rope_type != "default":
            raise ValueError(f"gated attention with rope_type {rope_type!r}: only 'default'")
        head_dim = config["head_dim"]
        return cls(
            hidden_size=config["hidden_size"],
            num_q_heads=config["num_attention_heads"],
            num_kv_heads=config["num_key_value_heads"],
            head_dim=head_dim,
            rotary_dim=int(head_dim * rope.get("partial_rotary_factor", 1.0)),
            rope_theta=rope["rope_theta"],
            rms_norm_eps=config["rms_norm_eps"],
            bias=config.get("attention_bias", False),
        )

    def cache_rope(self) -> dict[str, Any]:
        """RoPE arguments of the paged KV cache, which rotates q and k."""
        return {
            "rope_mode": RopeMode.NORMAL,
            "rope_scale": 1,
            "rope_theta": self.rope_theta,
            "rope_scaling": {},
            "rotary_dim": self.rotary_dim,
        }


class ZeroCentredRMSNorm(nn.Module):
    """RMSNorm times (1 + weight), in fp32, cast back to the input dtype."""

    def __init__(self, size: int, eps: float, dtype: str) -> None:
        self.weight = nn.Parameter((size,), dtype)
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        scale = op.astype(self.weight, NORM_DTYPE) + 1.0
        normed = op.rms_norm(op.astype(x, NORM_DTYPE), scale, axes=-1, epsilon=self.eps)
        return op.astype(normed, x.dtype)


class GatedAttention(nn.Module):
    """Self-attention over the paged KV cache with QK norm and a sigmoid output gate."""

    def __init__(self, options: GatedAttentionOptions, dtype: str) -> None:
        self.options = options
        o = options
        fused_rows = (2 * o.num_q_heads + 2 * o.num_kv_heads) * o.head_dim
        self.qkv_proj = NTLinear(o.hidden_size, fused_rows, o.bias, dtype)
        self.o_proj = NTLinear(o.num_q_heads * o.head_dim, o.hidden_size, o.bias, dtype)
        self.q_norm = ZeroCentredRMSNorm(o.head_dim, o.rms_norm_eps, dtype)
        self.k_norm = ZeroCentredRMSNorm(o.head_dim, o.rms_norm_eps, dtype)
        self.model_rope: tuple[np.ndarray, float] | None = None
        """(inverse frequencies, cos/sin factor) when the model rotates q/k (module doc)."""
        self.sectioned_positions: SectionedPositions | None = None
        """The M-RoPE streams of a forward that takes them (with `model_rope`)."""

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        """hidden [1, n, hidden] (ragged prefill) or [batch, 1, hidden] (decode)."""
        o = self.options
        batch, seq_len, _ = hidden.shape
        q_rows = 2 * o.num_q_heads * o.head_dim
        kv_rows = o.num_kv_heads * o.head_dim
        query_gate, k, v = op.split(self.qkv_proj(hidden), [q_rows, q_rows + kv_rows], axis=-1)
        query_gate = op.reshape(query_gate, (batch, seq_len, o.num_q_heads, 2 * o.head_dim))
        q, gate = op.split(query_gate, 2, axis=-1)
        k = op.reshape(k, (batch, seq_len, o.num_kv_heads, o.head_dim))
        v = op.reshape(v, (batch, seq_len, o.num_kv_heads, o.head_dim))
        qkv = op.concat([self.q_norm(q), self.k_norm(k), v], dim=2)
        if self.model_rope is not None:
            rotating_heads = o.num_q_heads + o.num_kv_heads
            qkv = rotate_by_model(
                qkv, kv_cache, self.model_rope, self.sectioned_positions, rotating_heads
            )
        attn = kv_cache.attention_with_fused_qkv(
            layer_id, qkv, o.num_q_heads, sm_scale=o.head_dim**-0.5
        )
        width = o.num_q_heads * o.head_dim
        gated = op.reshape(attn, (batch, seq_len, width)) * op.sigmoid(
            op.reshape(gate, (batch, seq_len, width))
        )
        return self.o_proj(gated)
