"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) written with `tvm.relax.frontend.nn`.

One definition covers the four families because they differ only in switches that
`LlamaFamilyConfig` carries (GQA, q/k/v bias, per-head q/k RMSNorm, tied embeddings, RoPE
scaling). Attention runs through TVM's paged KV cache (`TIRPagedKVCache`, or
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

from collections.abc import Callable
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
from vllm_tvm.model_defs.layers import NTLinear, nt_matmul

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
        if config.qk_norm:
            self.q_norm = nn.RMSNorm(
                self.head_dim, -1, config.rms_norm_eps, bias=False, dtype=dtype
            )
            self.k_norm = nn.RMSNorm(
                self.head_dim, -1, config.rms_norm_eps, bias=False, dtype=dtype
            )
        else:
            self.q_norm = None
            self.k_norm = None

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        batch, seq_len, _ = hidden.shape
        heads = self.num_q_heads + 2 * self.num_kv_heads
        qkv = op.reshape(self.qkv_proj(hidden), (batch, seq_len, heads, self.head_dim))
        if self.q_norm is not None:
            q, k, v = op.split(
                qkv, [self.num_q_heads, self.num_q_heads + self.num_kv_heads], axis=2
            )
            qkv = op.concat([self.q_norm(q), self.k_norm(k), v], dim=2)
        attn = kv_cache.attention_with_fused_qkv(
            layer_id, qkv, self.num_q_heads, sm_scale=self.head_dim**-0.5
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
    """Pre-norm attention + MLP block with residuals."""

    def __init__(self, config: LlamaFamilyConfig, dtype: str) -> None:
        eps = config.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(config.hidden_size, -1, eps, bias=False, dtype=dtype)
        self.self_attn = LlamaAttention(config, dtype)
        self.post_attention_layernorm = nn.RMSNorm(
            config.hidden_size, -1, eps, bias=False, dtype=dtype
        )
        self.mlp = LlamaMLP(config, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), kv_cache, layer_id)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


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
        self.model = LlamaModel(config, dtype, self._make_layer)
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else NTLinear(config.hidden_size, config.vocab_size, False, dtype)
        )

    def _make_layer(self, layer_id: int) -> nn.Module:
        """Decoder layer `layer_id`; definitions built on this one replace some layers."""
        return LlamaDecoderLayer(self.config, self.dtype)

    def _logits(self, hidden: Tensor) -> Tensor:
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return nt_matmul(hidden, weight, out_dtype="float32")

    def embed(self, input_ids: Tensor) -> Tensor:
        """Token ids [n] -> embeddings [n, hidden]."""
        return self.model.embed_tokens(input_ids)

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
        cache = cache_class(
            attn_kind="mha",
            max_batch_size=max_batch_size,
            max_total_seq_len=max_total_seq_len,
            prefill_chunk_size=prefill_chunk_size,
            page_size=page_size,
            support_sliding_window=support_sliding_window,
            layer_partition=rx.ShapeExpr([0, cfg.num_hidden_layers]),
            num_hidden_layers=cfg.num_hidden_layers,
            num_attention_heads=cfg.num_attention_heads,
            num_key_value_heads=cfg.num_key_value_heads,
            qk_head_dim=cfg.head_dim,
            v_head_dim=cfg.head_dim,
            mla_original_qk_head_dim=0,
            mla_original_v_head_dim=0,
            rope_mode=RopeMode.NORMAL,
            rope_scale=1.0 / cfg.linear_rope_factor,
            rope_theta=cfg.rope_theta,
            rope_scaling=rope_scaling,
            rope_ext_factors=rx.prim_value(0),
            rotary_dim=cfg.head_dim,
            enable_disaggregation=False,
            dtype=self.dtype,
            target=self.target,
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


def fused_weight_sources(param_name: str) -> tuple[list[str], int]:
    """Checkpoint tensor names whose concatenation (along the returned axis) is `param_name`."""
    for fused, parts in FUSED_PROJECTIONS.items():
        marker = f".{fused}."
        if marker in param_name:
            prefix, suffix = param_name.split(marker)
            return [f"{prefix}.{part}.{suffix}" for part in parts], 0
    return [param_name], 0
