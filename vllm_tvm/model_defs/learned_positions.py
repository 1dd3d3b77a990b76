"""GPT-2 and OPT: decoders with learned absolute positions, written with `relax.nn`.

Why a definition of its own: nothing here is llama-shaped (position embeddings added to the
token embeddings, LayerNorm with bias, GELU / ReLU MLP without a gate, biases on every
projection), so switches in llama.py would touch every line. What the two families share
with every decoder (the exported functions, the paged KV cache) comes from causal_lm.py;
the KV cache rotates nothing (`RopeMode.NONE`) and hands out each query token's position
(`get_query_positions`), which indexes the position table.

Parameter names are OPT's HF names with q/k/v fused into `qkv_proj`;
`opt_weight_sources()` / `gpt2_weight_sources()` map them to each checkpoint's tensors.
GPT-2 stores projections [in, out] (`Conv1D`); those parameters keep that layout.
"""

from __future__ import annotations

import re
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache, RopeMode
from tvm.target import Target

from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.layers import ACCUMULATION_DTYPE, NTLinear, nt_matmul
from vllm_tvm.model_defs.learned_positions_config import LearnedPositionConfig

GPT2_NAMES = [
    (r"^model\.decoder\.embed_tokens\.", "transformer.wte."),
    (r"^model\.decoder\.embed_positions\.", "transformer.wpe."),
    (r"^model\.decoder\.final_layer_norm\.", "transformer.ln_f."),
    (r"^model\.decoder\.layers\.(\d+)\.self_attn_layer_norm\.", r"transformer.h.\1.ln_1."),
    (r"^model\.decoder\.layers\.(\d+)\.self_attn\.qkv_proj\.", r"transformer.h.\1.attn.c_attn."),
    (r"^model\.decoder\.layers\.(\d+)\.self_attn\.out_proj\.", r"transformer.h.\1.attn.c_proj."),
    (r"^model\.decoder\.layers\.(\d+)\.final_layer_norm\.", r"transformer.h.\1.ln_2."),
    (r"^model\.decoder\.layers\.(\d+)\.fc1\.", r"transformer.h.\1.mlp.c_fc."),
    (r"^model\.decoder\.layers\.(\d+)\.fc2\.", r"transformer.h.\1.mlp.c_proj."),
]


class Conv1DLinear(nn.Module):
    """y = x W + b with W kept [in_features, out_features] (GPT-2's checkpoint layout).

    The product transposes W in the graph: TVM 0.27's GPU schedule of an [in, out] bfloat16
    product with a symbolic batch (batched decode) fails to lower ("dtype mismatch on
    BufferStore"), while the [out, in] product (nt_matmul) lowers everywhere. The transpose
    costs a weight copy per step; a load-time transpose would remove it."""

    def __init__(self, in_features: int, out_features: int, dtype: str) -> None:
        self.weight = nn.Parameter((in_features, out_features), dtype)
        self.bias = nn.Parameter((out_features,), dtype)

    def forward(self, x: Tensor) -> Tensor:
        return nt_matmul(x, op.permute_dims(self.weight)) + self.bias


class LayerNorm(nn.Module):
    """LayerNorm with weight and bias, computed in fp32 whatever the storage dtype (TVM's
    layer_norm lowers only float32 / float16, so bfloat16 is normalised as float32)."""

    def __init__(self, size: int, eps: float, dtype: str) -> None:
        self.size = size
        self.eps = eps
        self.weight = nn.Parameter((size,), dtype)
        self.bias = nn.Parameter((size,), dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == ACCUMULATION_DTYPE:
            return op.layer_norm(x, self.size, self.weight, self.bias, self.eps)
        normed = op.layer_norm(
            x.astype(ACCUMULATION_DTYPE),
            self.size,
            self.weight.astype(ACCUMULATION_DTYPE),
            self.bias.astype(ACCUMULATION_DTYPE),
            self.eps,
        )
        return normed.astype(x.dtype)


def _projection(
    config: LearnedPositionConfig, in_features: int, out_features: int, dtype: str
) -> nn.Module:
    """A biased projection in the checkpoint's layout ([in, out] for GPT-2, else [out, in])."""
    if config.conv1d_weights:
        return Conv1DLinear(in_features, out_features, dtype)
    return NTLinear(in_features, out_features, config.bias, dtype)


def _activation(name: str, x: Tensor) -> Tensor:
    """HF's `activation_function` (learned_positions_config.ACTIVATIONS)."""
    if name == "relu":
        return op.relu(x)
    return op.gelu(x, approximate=None if name == "gelu" else "tanh")


class LearnedPositionAttention(nn.Module):
    """Multi-head self-attention with a fused, biased qkv projection."""

    def __init__(self, config: LearnedPositionConfig, dtype: str) -> None:
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        width = self.num_heads * self.head_dim
        self.qkv_proj = _projection(config, config.hidden_size, 3 * width, dtype)
        self.out_proj = _projection(config, width, config.hidden_size, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        batch, seq_len, _ = hidden.shape
        qkv = op.reshape(self.qkv_proj(hidden), (batch, seq_len, 3 * self.num_heads, -1))
        attn = kv_cache.attention_with_fused_qkv(
            layer_id, qkv, self.num_heads, sm_scale=self.head_dim**-0.5
        )
        return self.out_proj(op.reshape(attn, (batch, seq_len, self.num_heads * self.head_dim)))


class LearnedPositionLayer(nn.Module):
    """Pre-LayerNorm attention + MLP block with residuals (HF OPT names)."""

    def __init__(self, config: LearnedPositionConfig, dtype: str) -> None:
        size, eps = config.hidden_size, config.layer_norm_eps
        self.hidden_act = config.hidden_act
        self.self_attn_layer_norm = LayerNorm(size, eps, dtype)
        self.self_attn = LearnedPositionAttention(config, dtype)
        self.final_layer_norm = LayerNorm(size, eps, dtype)
        self.fc1 = _projection(config, size, config.intermediate_size, dtype)
        self.fc2 = _projection(config, config.intermediate_size, size, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        hidden = hidden + self.self_attn(self.self_attn_layer_norm(hidden), kv_cache, layer_id)
        mlp = self.fc2(_activation(self.hidden_act, self.fc1(self.final_layer_norm(hidden))))
        return hidden + mlp


class LearnedPositionDecoder(nn.Module):
    """Token and position tables, layer stack and final LayerNorm."""

    def __init__(self, config: LearnedPositionConfig, dtype: str) -> None:
        size = config.hidden_size
        self.position_offset = config.position_offset
        self.embed_tokens = nn.Embedding(config.vocab_size, size, dtype=dtype)
        self.embed_positions = nn.Embedding(
            config.max_position_embeddings + config.position_offset, size, dtype=dtype
        )
        self.layers = nn.ModuleList(
            [LearnedPositionLayer(config, dtype) for _ in range(config.num_hidden_layers)]
        )
        self.final_layer_norm = LayerNorm(size, config.layer_norm_eps, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache) -> Tensor:
        batch, seq_len, size = hidden.shape
        positions = kv_cache.get_query_positions(batch * seq_len) + self.position_offset
        hidden = hidden + op.reshape(self.embed_positions(positions), (batch, seq_len, size))
        for layer_id, layer in enumerate(self.layers):
            hidden = layer(hidden, kv_cache, layer_id)
        return self.final_layer_norm(hidden)


class LearnedPositionModel(nn.Module):
    """HF's `model.` prefix."""

    def __init__(self, config: LearnedPositionConfig, dtype: str) -> None:
        self.decoder = LearnedPositionDecoder(config, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache) -> Tensor:
        return self.decoder(hidden, kv_cache)


class LearnedPositionForCausalLM(PagedCausalLM):
    """The exported GPT-2 / OPT model (functions: causal_lm.py)."""

    def __init__(
        self, config: LearnedPositionConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        """`attention`: `tir` (TVM's TIR kernels) or `flashinfer` (compiler/attention.py)."""
        super().__init__(config, dtype, target, attention)
        self.model = LearnedPositionModel(config, dtype)
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else NTLinear(config.hidden_size, config.vocab_size, False, dtype)
        )

    def embed(self, input_ids: Tensor) -> Tensor:
        """Token ids [n] -> token embeddings [n, hidden] (positions are added in the body)."""
        return self.model.decoder.embed_tokens(input_ids)

    def logits(self, hidden: Tensor) -> Tensor:
        """fp32 logits of final hidden states."""
        table = self.model.decoder.embed_tokens
        weight = table.weight if self.lm_head is None else self.lm_head.weight
        return nt_matmul(hidden, weight, out_dtype="float32")

    def cache_rope(self) -> dict[str, Any]:
        """No rotary embedding: the cache stores k as projected."""
        head_dim = self.config.head_dim
        return {
            "rope_mode": RopeMode.NONE,
            "rope_scale": 1.0,
            "rope_theta": 10000.0,
            "rope_scaling": {},
            "rotary_dim": head_dim,
        }


def opt_weight_sources(param_name: str) -> tuple[list[str], int]:
    """OPT checkpoint tensors of a parameter (q/k/v concatenated into qkv_proj)."""
    if ".self_attn.qkv_proj." in param_name:
        prefix, suffix = param_name.split(".self_attn.qkv_proj.")
        return [f"{prefix}.self_attn.{part}.{suffix}" for part in ("q_proj", "k_proj", "v_proj")], 0
    return [param_name], 0


def gpt2_weight_sources(param_name: str) -> tuple[list[str], int]:
    """The GPT-2 checkpoint tensor of a parameter (its projections are already fused)."""
    for pattern, replacement in GPT2_NAMES:
        renamed, count = re.subn(pattern, replacement, param_name)
        if count:
            return [renamed], 0
    return [param_name], 0
