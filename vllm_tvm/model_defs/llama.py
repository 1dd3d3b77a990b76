"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3, Gemma 1/2/3) written with
`tvm.relax.frontend.nn`.

One definition covers the families because they differ only in switches that
`LlamaFamilyConfig` carries (GQA, q/k/v bias, per-head q/k RMSNorm, tied embeddings, RoPE
scaling; Gemma's (1 + w) norms, scaled embeddings, GELU, sandwich norms, soft-capped final
logits, per-layer sliding windows and a sliding-layer RoPE base: gemma_options.py).

Attention runs through TVM's paged KV cache (`TIRPagedKVCache`, or
`FlashInferPagedKVCache` with FlashInfer's kernels: compiler/attention.py), which applies
RoPE to q/k itself; the exported functions follow the compiled contract in
docs/ARCHITECTURE.md: `embed`, `prefill` (ragged batch), `decode` (batch),
`create_kv_cache` (the compiler adds the device sampling functions `argmax` / `sample`:
compiler/sampling_functions.py).

Weights: q/k/v and gate/up are fused into one matrix each so a decode step runs one GEMV
instead of three (two). `fused_weight_sources()` tells the loader which checkpoint tensors
to concatenate; all other parameter names equal the HF names.
"""

from __future__ import annotations

from typing import Any

from tvm import relax as rx
from tvm import tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import (
    FlashInferPagedKVCache,
    PagedKVCache,
    RopeMode,
    TIRPagedKVCache,
)
from tvm.target import Target

from vllm_tvm.model_defs.config import LlamaFamilyConfig
from vllm_tvm.model_defs.layers import NTLinear, make_rms_norm, nt_matmul
from vllm_tvm.model_defs.rotary import apply_rotary

FUSED_PROJECTIONS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


class LlamaAttention(nn.Module):
    """Self-attention with fused qkv projection over the paged KV cache."""

    def __init__(self, config: LlamaFamilyConfig, dtype: str, layer_id: int) -> None:
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
        if config.qk_norm:
            self.q_norm = make_rms_norm(config, self.head_dim, dtype)
            self.k_norm = make_rms_norm(config, self.head_dim, dtype)
        else:
            self.q_norm = None
            self.k_norm = None
        scalar = config.query_pre_attn_scalar or self.head_dim
        self.sm_scale = scalar**-0.5
        self.rope_theta = _in_model_rope_theta(config, layer_id)
        self.linear_rope_factor = config.linear_rope_factor

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        batch, seq_len, _ = hidden.shape
        heads = self.num_q_heads + 2 * self.num_kv_heads
        qkv = op.reshape(self.qkv_proj(hidden), (batch, seq_len, heads, self.head_dim))
        if self.q_norm is not None or self.rope_theta is not None:
            q, k, v = op.split(
                qkv, [self.num_q_heads, self.num_q_heads + self.num_kv_heads], axis=2
            )
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            if self.rope_theta is not None:
                positions = kv_cache.get_query_positions(batch * seq_len)
                q = apply_rotary(q, positions, self.rope_theta, self.linear_rope_factor)
                k = apply_rotary(k, positions, self.rope_theta, self.linear_rope_factor)
            qkv = op.concat([q, k, v], dim=2)
        attn = kv_cache.attention_with_fused_qkv(
            layer_id, qkv, self.num_q_heads, sm_scale=self.sm_scale
        )
        attn = op.reshape(attn, (batch, seq_len, self.num_q_heads * self.head_dim))
        return self.o_proj(attn)


class LlamaMLP(nn.Module):
    """Gated feed-forward (SwiGLU, or GELU-gated for Gemma) with fused gate/up projection."""

    def __init__(self, config: LlamaFamilyConfig, dtype: str) -> None:
        self.intermediate_size = config.intermediate_size
        self.hidden_act = config.hidden_act
        self.gate_up_proj = NTLinear(
            config.hidden_size, 2 * config.intermediate_size, config.mlp_bias, dtype
        )
        self.down_proj = NTLinear(
            config.intermediate_size, config.hidden_size, config.mlp_bias, dtype
        )

    def forward(self, hidden: Tensor) -> Tensor:
        gate, up = op.split(self.gate_up_proj(hidden), 2, axis=-1)
        return self.down_proj(_ACTIVATIONS[self.hidden_act](gate) * up)


class LlamaDecoderLayer(nn.Module):
    """Pre-norm attention + MLP block with residuals.

    With `sandwich_norms` (Gemma 2/3) the branch outputs are normed too, and HF's names
    shift: `post_attention_layernorm` norms the attention output, `pre_feedforward_layernorm`
    the MLP input, `post_feedforward_layernorm` the MLP output.
    """

    def __init__(self, config: LlamaFamilyConfig, dtype: str, layer_id: int) -> None:
        size = config.hidden_size
        self.sandwich_norms = config.sandwich_norms
        self.input_layernorm = make_rms_norm(config, size, dtype)
        self.self_attn = LlamaAttention(config, dtype, layer_id)
        self.post_attention_layernorm = make_rms_norm(config, size, dtype)
        if self.sandwich_norms:
            self.pre_feedforward_layernorm = make_rms_norm(config, size, dtype)
            self.post_feedforward_layernorm = make_rms_norm(config, size, dtype)
        self.mlp = LlamaMLP(config, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        attn = self.self_attn(self.input_layernorm(hidden), kv_cache, layer_id)
        if not self.sandwich_norms:
            hidden = hidden + attn
            return hidden + self.mlp(self.post_attention_layernorm(hidden))
        hidden = hidden + self.post_attention_layernorm(attn)
        mlp = self.mlp(self.pre_feedforward_layernorm(hidden))
        return hidden + self.post_feedforward_layernorm(mlp)


class LlamaModel(nn.Module):
    """Embedding table, decoder stack and final norm (HF's `model.` prefix)."""

    def __init__(self, config: LlamaFamilyConfig, dtype: str) -> None:
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList(
            [LlamaDecoderLayer(config, dtype, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = make_rms_norm(config, config.hidden_size, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache) -> Tensor:
        for layer_id, layer in enumerate(self.layers):
            hidden = layer(hidden, kv_cache, layer_id)
        return self.norm(hidden)


class LlamaForCausalLM(nn.Module):
    """The exported model: the functions of the compiled contract."""

    def __init__(
        self, config: LlamaFamilyConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        """`attention`: `tir` (TVM's TIR kernels) or `flashinfer` (compiler/attention.py)."""
        self.config = config
        self.dtype = dtype
        self.target = target
        self.attention = attention
        self.kv_cache_extern_mods: list[Any] = []
        """Compiled objects the KV cache's kernels live in (FlashInfer), set by export."""
        self.model = LlamaModel(config, dtype)
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else NTLinear(config.hidden_size, config.vocab_size, False, dtype)
        )

    def _logits(self, hidden: Tensor) -> Tensor:
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = nt_matmul(hidden, weight, out_dtype="float32")
        cap = self.config.final_logit_softcapping
        return logits if cap is None else op.tanh(logits / cap) * cap

    def embed(self, input_ids: Tensor) -> Tensor:
        """Token ids [n] -> embeddings [n, hidden] (times `embedding_scale`)."""
        embeddings = self.model.embed_tokens(input_ids)
        scale = self.config.embedding_scale
        return embeddings if scale == 1.0 else embeddings * scale

    def prefill(
        self, input_embed: Tensor, logit_positions: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, PagedKVCache]:
        """Ragged prefill of the sequences begun in `kv_cache`; fp32 logits at the positions."""
        hidden = self.model(input_embed, kv_cache)
        hidden = op.take(hidden, logit_positions, axis=1)
        return self._logits(hidden), kv_cache

    def decode(self, input_embed: Tensor, kv_cache: PagedKVCache) -> tuple[Tensor, PagedKVCache]:
        """One token for each of `batch` sequences; fp32 logits [batch, 1, vocab]."""
        hidden = self.model(input_embed, kv_cache)
        return self._logits(hidden), kv_cache

    def decode_single(
        self, input_embed: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, PagedKVCache]:
        """`decode` for exactly one sequence: static shapes let every projection be
        scheduled as a plain GEMV (the batch-1 case is the latency-critical one)."""
        return self.decode(input_embed, kv_cache)

    def create_kv_cache(
        self,
        max_batch_size: tirx.Var,
        max_total_seq_len: tirx.Var,
        prefill_chunk_size: tirx.Var,
        page_size: tirx.Var,
        support_sliding_window: tirx.Var,
    ) -> PagedKVCache:
        """The paged KV cache object, sized at run time."""
        cfg = self.config
        rope_scaling: dict[str, Any] = (
            {"rope_type": "llama3", **cfg.rope_scaling} if cfg.rope_type == "llama3" else {}
        )
        cache_class = FlashInferPagedKVCache if self.attention == "flashinfer" else TIRPagedKVCache
        kinds = cfg.kv_cache_layer_kinds
        cache = cache_class(
            attn_kind=kinds,
            max_batch_size=max_batch_size,
            max_total_seq_len=max_total_seq_len,
            prefill_chunk_size=prefill_chunk_size,
            page_size=page_size,
            support_sliding_window=support_sliding_window,
            layer_partition=rx.ShapeExpr([0, len(kinds)]),
            num_hidden_layers=len(kinds),
            num_attention_heads=cfg.num_attention_heads,
            num_key_value_heads=cfg.num_key_value_heads,
            qk_head_dim=cfg.head_dim,
            v_head_dim=cfg.head_dim,
            mla_original_qk_head_dim=0,
            mla_original_v_head_dim=0,
            rope_mode=RopeMode.NONE if cfg.rope_local_theta is not None else RopeMode.NORMAL,
            rope_scale=1.0 / cfg.linear_rope_factor,
            rope_theta=cfg.rope_theta,
            rope_scaling=rope_scaling,
            rope_ext_factors=rx.prim_value(0),
            rotary_dim=cfg.head_dim,
            enable_disaggregation=False,
            dtype=self.dtype,
            target=self.target,
            # TVM wants a positive size even when no layer slides (then unused).
            layer_sliding_window_size=cfg.sliding_window or cfg.max_position_embeddings,
        )
        self.kv_cache_extern_mods = list(getattr(cache, "extern_mods", []))
        return cache

    def export_spec(self) -> dict[str, Any]:
        """Signatures of the exported functions (symbolic sizes named)."""
        hidden = self.config.hidden_size
        packed = {"param_mode": "packed", "effect_mode": "none"}
        kv = nn.spec.Object(object_type=PagedKVCache)
        return {
            "embed": {"input_ids": nn.spec.Tensor(["seq_len"], "int32"), "$": packed},
            "prefill": {
                "input_embed": nn.spec.Tensor([1, "seq_len", hidden], self.dtype),
                "logit_positions": nn.spec.Tensor(["num_logits"], "int32"),
                "kv_cache": kv,
                "$": packed,
            },
            "decode": {
                "input_embed": nn.spec.Tensor(["batch_size", 1, hidden], self.dtype),
                "kv_cache": kv,
                "$": packed,
            },
            "decode_single": {
                "input_embed": nn.spec.Tensor([1, 1, hidden], self.dtype),
                "kv_cache": kv,
                "$": packed,
            },
            "create_kv_cache": {
                "max_batch_size": int,
                "max_total_seq_len": int,
                "prefill_chunk_size": int,
                "page_size": int,
                "support_sliding_window": int,
                "$": {"param_mode": "none", "effect_mode": "none"},
            },
        }


_ACTIVATIONS = {
    "silu": op.silu,
    "gelu_pytorch_tanh": lambda x: op.gelu(x, approximate="tanh"),
    "gelu": op.gelu,
}


def _in_model_rope_theta(config: LlamaFamilyConfig, layer_id: int) -> float | None:
    """The RoPE base this layer applies itself, or None when the KV cache applies RoPE (one
    base for all layers): see rotary.py."""
    if config.rope_local_theta is None:
        return None
    return config.rope_local_theta if config.sliding_layers[layer_id] else config.rope_theta


def fused_weight_sources(param_name: str) -> tuple[list[str], int]:
    """Checkpoint tensor names whose concatenation (along the returned axis) is `param_name`."""
    for fused, parts in FUSED_PROJECTIONS.items():
        marker = f".{fused}."
        if marker in param_name:
            prefix, suffix = param_name.split(marker)
            return [f"{prefix}.{part}.{suffix}" for part in parts], 0
    return [param_name], 0
