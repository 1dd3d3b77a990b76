"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3, Phi-3, OLMo-2, Granite) in `relax.nn`.

One definition covers these families because they differ only in switches that
`LlamaFamilyConfig` carries (GQA, q/k/v bias, q/k RMSNorm per head or per projection, pre or
post sublayer norms, Granite's multipliers, tied embeddings, RoPE scaling, partial rotary).
Attention runs through TVM's paged KV cache (`TIRPagedKVCache`, or `FlashInferPagedKVCache`
with FlashInfer's kernels: compiler/attention.py), which applies RoPE to q/k itself (but
for yarn and longrope, which the model applies: rotary.py); the exported functions follow
the compiled contract in docs/ARCHITECTURE.md: `embed`, `prefill` (ragged batch), `decode`
(batch), `create_kv_cache` (the compiler adds the device sampling functions `argmax` /
`sample`: compiler/sampling_functions.py).

Weights: q/k/v and gate/up are fused into one matrix each so a decode step runs one GEMV
instead of three (two). `fused_weight_sources()` tells the loader which checkpoint tensors
to concatenate; all other parameter names equal the HF names. Phi-3 checkpoints store the
fused matrices themselves under the same names (`prefused_weight_sources()`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import (
    PagedKVCache,
    RopeMode,
)
from tvm.target import Target

from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.config import LlamaFamilyConfig
from vllm_tvm.model_defs.layers import NTLinear, nt_matmul
from vllm_tvm.model_defs.rope_scaling import (
    MODEL_APPLIED_ROPE_TYPES,
    kv_cache_rope,
    model_applied_rope,
)
from vllm_tvm.model_defs.rotary import apply_rotary

FUSED_PROJECTIONS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


class LlamaAttention(nn.Module):
    """Self-attention with fused qkv projection over the paged KV cache."""

    def __init__(self, config: LlamaFamilyConfig, dtype: str) -> None:
        self.num_q_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        fused_heads = self.num_q_heads + 2 * self.num_kv_heads
        self.qkv_proj = NTLinear(
            config.hidden_size, fused_heads * self.head_dim, config.qkv_bias, dtype
        )
        self.o_proj = NTLinear(
            self.num_q_heads * self.head_dim, config.hidden_size, config.o_proj_bias, dtype
        )
        self.sm_scale = config.attention_scale
        self.model_rope = model_applied_rope(
            config.rope_type, config.rope_scaling, config.rope_theta, config.rotary_dim
        )
        self.qk_norm_scope = config.qk_norm_scope
        self.q_norm = None
        self.k_norm = None
        if config.qk_norm:
            per_projection = config.qk_norm_scope == "projection"
            q_size = self.num_q_heads * self.head_dim if per_projection else self.head_dim
            k_size = self.num_kv_heads * self.head_dim if per_projection else self.head_dim
            eps = config.rms_norm_eps
            self.q_norm = nn.RMSNorm(q_size, -1, eps, bias=False, dtype=dtype)
            self.k_norm = nn.RMSNorm(k_size, -1, eps, bias=False, dtype=dtype)

    def _normed_qkv(self, qkv: Tensor) -> Tensor:
        """q and k through their RMSNorms, per head or over the whole projection."""
        q_width = self.num_q_heads
        k_width = self.num_kv_heads
        if self.qk_norm_scope == "projection":
            q_width *= self.head_dim
            k_width *= self.head_dim
        q, k, v = op.split(qkv, [q_width, q_width + k_width], axis=2)
        return op.concat([self.q_norm(q), self.k_norm(k), v], dim=2)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        batch, seq_len, _ = hidden.shape
        heads = self.num_q_heads + 2 * self.num_kv_heads
        qkv = self.qkv_proj(hidden)
        if self.q_norm is not None and self.qk_norm_scope == "projection":
            qkv = self._normed_qkv(qkv)
        qkv = op.reshape(qkv, (batch, seq_len, heads, self.head_dim))
        if self.q_norm is not None and self.qk_norm_scope == "head":
            qkv = self._normed_qkv(qkv)
        if self.model_rope is not None:
            inv_freq, cos_sin_factor = self.model_rope
            rotating_heads = self.num_q_heads + self.num_kv_heads
            qkv = apply_rotary(qkv, kv_cache, inv_freq, cos_sin_factor, rotating_heads)
        attn = kv_cache.attention_with_fused_qkv(
            layer_id, qkv, self.num_q_heads, sm_scale=self.sm_scale
        )
        attn = op.reshape(attn, (batch, seq_len, self.num_q_heads * self.head_dim))
        return self.o_proj(attn)


class LlamaMLP(nn.Module):
    """SwiGLU feed-forward with fused gate/up projection."""

    def __init__(
        self, config: LlamaFamilyConfig, dtype: str, intermediate_size: int | None = None
    ) -> None:
        """`intermediate_size` overrides the config's (an expert model's shared expert)."""
        self.intermediate_size = intermediate_size or config.intermediate_size
        self.gate_up_proj = NTLinear(
            config.hidden_size, 2 * self.intermediate_size, config.mlp_bias, dtype
        )
        self.down_proj = NTLinear(
            self.intermediate_size, config.hidden_size, config.mlp_bias, dtype
        )

    def forward(self, hidden: Tensor) -> Tensor:
        gate, up = op.split(self.gate_up_proj(hidden), 2, axis=-1)
        return self.down_proj(op.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    """Attention + MLP block with residuals; RMSNorms before the sublayers (`pre`, HF names
    input_layernorm / post_attention_layernorm) or on their outputs (`post`, OLMo-2's
    post_attention_layernorm / post_feedforward_layernorm)."""

    def __init__(self, config: LlamaFamilyConfig, dtype: str) -> None:
        eps = config.rms_norm_eps
        size = config.hidden_size
        self.post_norms = config.norm_position == "post"
        self.residual_multiplier = config.residual_multiplier
        self.input_layernorm = (
            None if self.post_norms else nn.RMSNorm(size, -1, eps, bias=False, dtype=dtype)
        )
        self.self_attn = LlamaAttention(config, dtype)
        self.post_attention_layernorm = nn.RMSNorm(size, -1, eps, bias=False, dtype=dtype)
        self.post_feedforward_layernorm = (
            nn.RMSNorm(size, -1, eps, bias=False, dtype=dtype) if self.post_norms else None
        )
        self.mlp = LlamaMLP(config, dtype)

    def _residual(self, hidden: Tensor, update: Tensor) -> Tensor:
        if self.residual_multiplier != 1.0:
            update = update * self.residual_multiplier
        return hidden + update

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        if self.post_norms:
            attn = self.post_attention_layernorm(self.self_attn(hidden, kv_cache, layer_id))
            hidden = self._residual(hidden, attn)
            return self._residual(hidden, self.post_feedforward_layernorm(self.mlp(hidden)))
        attn = self.self_attn(self.input_layernorm(hidden), kv_cache, layer_id)
        hidden = self._residual(hidden, attn)
        return self._residual(hidden, self.mlp(self.post_attention_layernorm(hidden)))


class LlamaModel(nn.Module):
    """Embedding table, decoder stack and final norm (HF's `model.` prefix)."""

    def __init__(
        self,
        config: LlamaFamilyConfig,
        dtype: str,
        make_layer: Callable[[int], nn.Module] | None = None,
    ) -> None:
        """`make_layer(layer_id)` builds each decoder layer (default: `LlamaDecoderLayer`)."""
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype)
        make_layer = make_layer or (lambda _: LlamaDecoderLayer(config, dtype))
        self.layers = nn.ModuleList([make_layer(i) for i in range(config.num_hidden_layers)])
        self.norm = nn.RMSNorm(config.hidden_size, -1, config.rms_norm_eps, bias=False, dtype=dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache) -> Tensor:
        for layer_id, layer in enumerate(self.layers):
            hidden = layer(hidden, kv_cache, layer_id)
        return self.norm(hidden)


class LlamaForCausalLM(PagedCausalLM):
    """The exported model: the functions of the compiled contract (causal_lm.py)."""

    def __init__(
        self, config: LlamaFamilyConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        """`attention`: `tir` (TVM's TIR kernels) or `flashinfer` (compiler/attention.py)."""
        super().__init__(config, dtype, target, attention)
        self.model = LlamaModel(config, dtype, self._make_layer)
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else NTLinear(config.hidden_size, config.vocab_size, False, dtype)
        )

    def _make_layer(self, layer_id: int) -> nn.Module:
        """Decoder layer `layer_id`; definitions built on this one replace some layers."""
        return LlamaDecoderLayer(self.config, self.dtype)

    def logits(self, hidden: Tensor) -> Tensor:
        """fp32 logits of final hidden states (divided by Granite's logits scaling)."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = nt_matmul(hidden, weight, out_dtype="float32")
        if self.config.logits_scaling != 1.0:
            logits = logits / self.config.logits_scaling
        return logits

    def embed(self, input_ids: Tensor) -> Tensor:
        """Token ids [n] -> embeddings [n, hidden] (times Granite's embedding multiplier)."""
        embeddings = self.model.embed_tokens(input_ids)
        if self.config.embedding_multiplier != 1.0:
            embeddings = embeddings * self.config.embedding_multiplier
        return embeddings

    def cache_rope(self) -> dict[str, Any]:
        """RoPE arguments of the paged KV cache (it rotates q/k unless the model does)."""
        cfg = self.config
        rope_scale, rope_scaling = kv_cache_rope(cfg.rope_type, cfg.rope_scaling)
        model_rotates = cfg.rope_type in MODEL_APPLIED_ROPE_TYPES
        return {
            "rope_mode": RopeMode.NONE if model_rotates else RopeMode.NORMAL,
            "rope_scale": rope_scale,
            "rope_theta": cfg.rope_theta,
            "rope_scaling": rope_scaling,
            "rotary_dim": cfg.rotary_dim,
        }


def fused_weight_sources(param_name: str) -> tuple[list[str], int]:
    """Checkpoint tensor names whose concatenation (along the returned axis) is `param_name`."""
    for fused, parts in FUSED_PROJECTIONS.items():
        marker = f".{fused}."
        if marker in param_name:
            prefix, suffix = param_name.split(marker)
            return [f"{prefix}.{part}.{suffix}" for part in parts], 0
    return [param_name], 0


def prefused_weight_sources(param_name: str) -> tuple[list[str], int]:
    """Checkpoints that already store qkv_proj / gate_up_proj: every name is its own source."""
    return [param_name], 0
