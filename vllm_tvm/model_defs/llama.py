"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3, Phi-3, OLMo-2, Granite, Gemma 1/2/3)
in `relax.nn`.

One definition covers these families because they differ only in switches that
`LlamaFamilyConfig` carries (GQA, q/k/v bias, q/k RMSNorm per head or per projection, pre,
post or sandwich sublayer norms, Granite's multipliers, tied embeddings, RoPE scaling,
partial rotary; Gemma's (1 + w) norms, scaled embeddings, GELU, soft-capped final logits,
per-layer sliding windows and sliding-layer RoPE base: checkpoints/families/gemma.py).
Attention runs through TVM's paged KV cache (`TIRPagedKVCache`, or `FlashInferPagedKVCache` with
FlashInfer's kernels: compiler/attention.py), which applies RoPE to q/k itself (but for
yarn, longrope and per-layer RoPE bases, which the model applies: rotary.py); the exported
functions follow the compiled contract in docs/ARCHITECTURE.md: `embed`, `prefill` (ragged
batch), `decode` (batch), `create_kv_cache` (the compiler adds the device sampling functions
`argmax` / `sample`: compiler/sampling_functions.py).

Weights: q/k/v and gate/up are fused into one matrix each so a decode step runs one GEMV
instead of three (two). `fused_weight_sources()` tells the loader which checkpoint tensors
to concatenate; all other parameter names equal the HF names. Phi-3 checkpoints store the
fused matrices themselves under the same names (`prefused_weight_sources()`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import (
    PagedKVCache,
    RopeMode,
)
from tvm.target import Target

from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.config import LlamaFamilyConfig
from vllm_tvm.model_defs.layers import NTLinear, make_rms_norm, nt_matmul
from vllm_tvm.model_defs.rope_scaling import (
    MODEL_APPLIED_ROPE_TYPES,
    kv_cache_rope,
    model_applied_rope,
    rope_frequencies,
)
from vllm_tvm.model_defs.rotary import SectionedPositions, rotate_by_model
from vllm_tvm.model_defs.tensor_parallel import rank_widths, shards_of

FUSED_PROJECTIONS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


class BlockAttention(Protocol):
    """Rewrites rows of an attention output from the q/k/v it was computed from."""

    def __call__(
        self, qkv: Tensor, causal: Tensor, q_heads: int, kv_heads: int, sm_scale: float
    ) -> Tensor: ...


class LlamaAttention(nn.Module):
    """Self-attention with fused qkv projection over the paged KV cache."""

    def __init__(self, config: LlamaFamilyConfig, dtype: str, layer_id: int) -> None:
        widths = rank_widths(config)
        self.num_q_heads = widths.q_heads
        self.num_kv_heads = widths.kv_heads
        self.shards = shards_of(config)
        self.head_dim = config.head_dim
        fused_heads = self.num_q_heads + 2 * self.num_kv_heads
        kv_rows = self.num_kv_heads * self.head_dim
        self.qkv_proj = NTLinear(
            config.hidden_size,
            fused_heads * self.head_dim,
            config.qkv_bias,
            dtype,
            part_rows=(self.num_q_heads * self.head_dim, kv_rows, kv_rows),
        )
        self.o_proj = NTLinear(
            self.num_q_heads * self.head_dim, config.hidden_size, config.o_proj_bias, dtype
        )
        self.sm_scale = config.attention_scale
        self.model_rope = _layer_rope(config, layer_id)
        self.sectioned_positions: SectionedPositions | None = None
        """Set by a definition with multi-section RoPE (qwen2_5_vl.py): a forward that
        sets its positions rotates by them; any other rotates at the cache's positions."""
        self.block_attention: BlockAttention | None = None
        """Set by a definition whose prefill lets some rows see more than the causal past
        (image_block_attention.py); it may replace rows of the cache's attention output."""
        self.qk_norm_scope = config.qk_norm_scope
        self.q_norm = None
        self.k_norm = None
        if config.qk_norm:
            per_projection = config.qk_norm_scope == "projection"
            q_size = self.num_q_heads * self.head_dim if per_projection else self.head_dim
            k_size = self.num_kv_heads * self.head_dim if per_projection else self.head_dim
            self.q_norm = make_rms_norm(config, q_size, dtype)
            self.k_norm = make_rms_norm(config, k_size, dtype)

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
            rotating_heads = self.num_q_heads + self.num_kv_heads
            qkv = rotate_by_model(
                qkv, kv_cache, self.model_rope, self.sectioned_positions, rotating_heads
            )
        attn = kv_cache.attention_with_fused_qkv(
            layer_id, qkv, self.num_q_heads, sm_scale=self.sm_scale
        )
        if self.block_attention is not None:
            attn = self.block_attention(
                qkv, attn, self.num_q_heads, self.num_kv_heads, self.sm_scale
            )
        attn = op.reshape(attn, (batch, seq_len, self.num_q_heads * self.head_dim))
        return sum_over_ranks(self.o_proj(attn), self.shards)


class LlamaMLP(nn.Module):
    """Gated feed-forward (SwiGLU, or GELU-gated for Gemma) with fused gate/up projection."""

    def __init__(
        self, config: LlamaFamilyConfig, dtype: str, intermediate_size: int | None = None
    ) -> None:
        """`intermediate_size` overrides the config's (an expert model's shared expert)."""
        self.intermediate_size = rank_widths(config, intermediate_size).intermediate_size
        self.shards = shards_of(config)
        self.activation = _ACTIVATIONS[config.hidden_act]
        self.gate_up_proj = NTLinear(
            config.hidden_size,
            2 * self.intermediate_size,
            config.mlp_bias,
            dtype,
            part_rows=(self.intermediate_size, self.intermediate_size),
        )
        self.down_proj = NTLinear(
            self.intermediate_size, config.hidden_size, config.mlp_bias, dtype
        )

    def forward(self, hidden: Tensor) -> Tensor:
        gate, up = op.split(self.gate_up_proj(hidden), 2, axis=-1)
        return sum_over_ranks(self.down_proj(self.activation(gate) * up), self.shards)


def sum_over_ranks(partial: Tensor, shards: int) -> Tensor:
    """A row-parallel projection's output: the all-reduced sum of the ranks' partial products
    (the input as is on one rank)."""
    return op.ccl_allreduce(partial, "sum") if shards > 1 else partial


class LlamaDecoderLayer(nn.Module):
    """Attention + MLP block with residuals, RMSNorms placed by `norm_position`:

    - `pre` (Llama): before each sublayer, HF names input_layernorm / post_attention_layernorm;
    - `post` (OLMo-2): on each sublayer's output, post_attention_layernorm /
      post_feedforward_layernorm;
    - with `sandwich_norms` (Gemma 2/3) both: input_layernorm and pre_feedforward_layernorm
      before, post_attention_layernorm and post_feedforward_layernorm after the sublayers.
    """

    def __init__(self, config: LlamaFamilyConfig, dtype: str, layer_id: int) -> None:
        size = config.hidden_size
        self.pre_norms = config.norm_position == "pre"
        self.post_norms = config.norm_position == "post" or config.sandwich_norms
        self.residual_multiplier = config.residual_multiplier
        self.input_layernorm = make_rms_norm(config, size, dtype) if self.pre_norms else None
        self.self_attn = LlamaAttention(config, dtype, layer_id)
        self.post_attention_layernorm = make_rms_norm(config, size, dtype)
        self.pre_feedforward_layernorm = (
            make_rms_norm(config, size, dtype) if config.sandwich_norms else None
        )
        self.post_feedforward_layernorm = (
            make_rms_norm(config, size, dtype) if self.post_norms else None
        )
        self.mlp = LlamaMLP(config, dtype)

    def _residual(self, hidden: Tensor, update: Tensor) -> Tensor:
        if self.residual_multiplier != 1.0:
            update = update * self.residual_multiplier
        return hidden + update

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        normed = self.input_layernorm(hidden) if self.input_layernorm is not None else hidden
        attn = self.self_attn(normed, kv_cache, layer_id)
        if not self.post_norms:
            hidden = self._residual(hidden, attn)
            return self._residual(hidden, self.mlp(self.post_attention_layernorm(hidden)))
        hidden = self._residual(hidden, self.post_attention_layernorm(attn))
        if self.pre_feedforward_layernorm is not None:
            normed = self.pre_feedforward_layernorm(hidden)
        else:
            normed = hidden
        return self._residual(hidden, self.post_feedforward_layernorm(self.mlp(normed)))


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
        make_layer = make_layer or (lambda i: LlamaDecoderLayer(config, dtype, i))
        self.layers = nn.ModuleList([make_layer(i) for i in range(config.num_hidden_layers)])
        self.norm = make_rms_norm(config, config.hidden_size, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache) -> Tensor:
        return self.forward_capturing(hidden, kv_cache, ())[0]

    def forward_capturing(
        self, hidden: Tensor, kv_cache: PagedKVCache, layer_ids: tuple[int, ...]
    ) -> tuple[Tensor, list[Tensor]]:
        """The final-norm hidden states and the input of each layer of `layer_ids` (the
        residual stream entering it), in layer order: what an EAGLE-3 head reads."""
        captured = []
        for layer_id, layer in enumerate(self.layers):
            if layer_id in layer_ids:
                captured.append(hidden)
            hidden = layer(hidden, kv_cache, layer_id)
        return self.norm(hidden), captured


class LlamaForCausalLM(PagedCausalLM):
    """The exported model: the functions of the compiled contract (causal_lm.py)."""

    owned_kv_ready = True

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
        return LlamaDecoderLayer(self.config, self.dtype, layer_id)

    def prefill_hidden(
        self, input_embed: Tensor, logit_positions: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        """`prefill`, and every token's hidden states: the final-norm ones, or for a target
        built for an EAGLE-3 head the inputs of its `aux_hidden_layers` concatenated
        [1, seq_len, layers * hidden]."""
        layer_ids = self.config.aux_hidden_layers
        if not layer_ids:
            return super().prefill_hidden(input_embed, logit_positions, kv_cache)
        hidden, captured = self.model.forward_capturing(input_embed, kv_cache, layer_ids)
        logits = self.logits(op.take(hidden, logit_positions, axis=1))
        return logits, op.concat(captured, dim=-1), kv_cache

    def logits(self, hidden: Tensor) -> Tensor:
        """fp32 logits of final hidden states (divided by Granite's logits scaling, soft-capped
        by Gemma's final cap)."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = nt_matmul(hidden, weight, out_dtype="float32")
        if self.config.logits_scaling != 1.0:
            logits = logits / self.config.logits_scaling
        cap = self.config.final_logit_softcapping
        return logits if cap is None else op.tanh(logits / cap) * cap

    def embed(self, input_ids: Tensor) -> Tensor:
        """Token ids [n] -> embeddings [n, hidden] (times `embedding_scale`)."""
        embeddings = self.model.embed_tokens(input_ids)
        scale = self.config.embedding_scale
        return embeddings if scale == 1.0 else embeddings * scale

    def cache_heads(self) -> tuple[int, int]:
        """(q heads, KV heads) of one rank: the cache holds that rank's heads only."""
        widths = rank_widths(self.config)
        return widths.q_heads, widths.kv_heads

    def cache_rope(self) -> dict[str, Any]:
        """RoPE arguments of the paged KV cache (it rotates q/k unless the model does)."""
        cfg = self.config
        rope_scale, rope_scaling = kv_cache_rope(cfg.rope_type, cfg.rope_scaling)
        model_rotates = (
            cfg.rope_type in MODEL_APPLIED_ROPE_TYPES or cfg.rope_local_theta is not None
        )
        return {
            "rope_mode": RopeMode.NONE if model_rotates else RopeMode.NORMAL,
            "rope_scale": rope_scale,
            "rope_theta": cfg.rope_theta,
            "rope_scaling": rope_scaling,
            "rotary_dim": cfg.rotary_dim,
        }

    def cache_layers(self) -> dict[str, Any]:
        """Per-layer attention kinds of the cache (sliding layers: `mha_sliding`) and their
        window (TVM wants a positive size even when no layer slides; then it is unused)."""
        cfg = self.config
        return {
            "attn_kind": cfg.kv_cache_layer_kinds,
            "layer_sliding_window_size": cfg.sliding_window or cfg.max_position_embeddings,
        }


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": op.silu,
    "gelu_pytorch_tanh": lambda x: op.gelu(x, approximate="tanh"),
    "gelu": op.gelu,
}


def _layer_rope(config: LlamaFamilyConfig, layer_id: int) -> tuple[np.ndarray, float] | None:
    """(inverse frequencies, cos/sin factor) when layer `layer_id` rotates q/k itself, else
    None (the KV cache rotates): with a sliding-layer RoPE base every layer rotates itself."""
    if config.rope_local_theta is None:
        return model_applied_rope(
            config.rope_type, config.rope_scaling, config.rope_theta, config.rotary_dim
        )
    if config.sliding_layers[layer_id]:
        return rope_frequencies("default", {}, config.rope_local_theta, config.rotary_dim)
    return rope_frequencies(
        config.rope_type, config.rope_scaling, config.rope_theta, config.rotary_dim
    )


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
