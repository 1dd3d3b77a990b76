"""DeepSeek-V2 / V3 decoder: multi-head latent attention (MLA) and grouped expert routing.

Attention: per token the cache keeps only the normalised latent c (kv_lora_rank) and the
rotated shared key k_pe (qk_rope_head_dim) (mla_cache.py). New tokens attend to each other
with full keys and values expanded from c by `kv_b_proj` ("self" attention); queries attend
to the cached latents with the key and value up-projections absorbed into the query and the
output ("cross" attention: q_lat[h] = q_nope[h] W_UK[h], o[h] = o_lat[h] W_UV[h], both
slices of `kv_b_proj`, never materialised per token). Which of the two a forward needs
depends on what the runtime cache holds (mla_cache.py), hence three exported forwards:
`prefill` (no sequence has cached tokens: self), `extend` (self + cross, merged) and
`decode` (every sequence appends one token, already in the cache: cross).

Routing (DeepSeekMoE): softmax (V2) or sigmoid + e_score_correction_bias (V3) scores, top-k
optionally limited to the best `topk_group` of `n_group` expert groups, V3's
renormalisation, `routed_scaling_factor`; the routed experts are model_defs/moe.py's
stacked experts, plus always-on shared experts. Layers before `first_k_dense_replace` are
dense. MTP layers (V3's `num_nextn_predict_layers`) are not part of the exported model: they
are a model of their own (deepseek_mtp.py), fed the hidden states `*_hidden` export.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import te, tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache

from vllm_tvm.model_defs.deepseek_config import DeepseekConfig
from vllm_tvm.model_defs.layers import ACCUMULATION_DTYPE, NTLinear, nt_matmul
from vllm_tvm.model_defs.llama import LlamaMLP
from vllm_tvm.model_defs.mla_cache import mla_paged_kv_cache
from vllm_tvm.model_defs.moe import MoEForCausalLM, StackedExperts, one_token_each

PREFILL, EXTEND, DECODE = "prefill", "extend", "decode"


def _rope(
    x: te.Tensor, positions: te.Tensor, inv_freq: te.Tensor, factor: float, interleave: bool
) -> te.Tensor:
    """Rotate the last axis of x [b, s, heads, rope] by each token's position."""
    half = x.shape[-1] // 2

    def rotated(b: tirx.Var, s: tirx.Var, h: tirx.Var, d: tirx.Var) -> tirx.PrimExpr:
        pair = d // 2 if interleave else d % half
        first = d % 2 == 0 if interleave else d < half
        partner = (
            tirx.Select(first, d + 1, d - 1)
            if interleave
            else tirx.Select(first, d + half, d - half)
        )
        angle = positions[b * x.shape[1] + s].astype("float32") * inv_freq[pair]
        cos = tirx.cos(angle) * tirx.const(factor, "float32")
        sin = tirx.sin(angle) * tirx.const(factor, "float32")
        value = x[b, s, h, d].astype("float32")
        other = x[b, s, h, partner].astype("float32")
        out = value * cos + tirx.Select(first, -other, other) * sin
        return out.astype(x.dtype)

    return te.compute(x.shape, rotated, name="mla_rope")


def _head_matmul(
    x: te.Tensor, weight: te.Tensor, offset: int, rows: int, reduce_rows: bool
) -> te.Tensor:
    """Per-head products with slices of kv_b_proj viewed [heads, nope + v, latent].

    reduce_rows (absorb W_UK): out[t, h, c] = sum_n x[t, h, n] * W[h, offset + n, c];
    else (apply W_UV): out[t, h, v] = sum_c x[t, h, c] * W[h, offset + v, c]."""
    tokens, heads, width = x.shape
    k = te.reduce_axis((0, width), name="k")
    if reduce_rows:
        shape = (tokens, heads, weight.shape[-1])

        def product(t: tirx.Var, h: tirx.Var, c: tirx.Var) -> tirx.PrimExpr:
            return x[t, h, k].astype(ACCUMULATION_DTYPE) * weight[h, offset + k, c].astype(
                ACCUMULATION_DTYPE
            )
    else:
        shape = (tokens, heads, rows)

        def product(t: tirx.Var, h: tirx.Var, v: tirx.Var) -> tirx.PrimExpr:
            return x[t, h, k].astype(ACCUMULATION_DTYPE) * weight[h, offset + v, k].astype(
                ACCUMULATION_DTYPE
            )

    acc = te.compute(shape, lambda *i: te.sum(product(*i), axis=k), name="mla_head_matmul_acc")
    if x.dtype == ACCUMULATION_DTYPE:
        return acc
    return te.compute(shape, lambda *i: acc[i].astype(x.dtype), name="mla_head_matmul")


class FloatLinear(nn.Module):
    """A bias-free linear whose weight stays a float array: `kv_b_proj`, which the absorbed
    attention also reads sliced per head. Not an `NTLinear`, so no quantized weight format
    (quant_linear.quantizable_weights) is ever chosen for it; checkpoints stored quantized
    are dequantized at load."""

    def __init__(self, in_features: int, out_features: int, dtype: str) -> None:
        self.weight = nn.Parameter((out_features, in_features), dtype)

    def forward(self, x: Tensor) -> Tensor:
        return nt_matmul(x, self.weight)


class MLAAttention(nn.Module):
    """Multi-head latent attention over the MLA paged cache (see the module docstring)."""

    def __init__(self, config: DeepseekConfig, dtype: str) -> None:
        self.config = config
        self.heads = config.num_attention_heads
        self.nope, self.rope = config.qk_nope_head_dim, config.qk_rope_head_dim
        self.v_dim, self.latent = config.v_head_dim, config.kv_lora_rank
        q_width = self.heads * (self.nope + self.rope)
        hidden, eps = config.hidden_size, config.rms_norm_eps
        if config.q_lora_rank:
            self.q_a_proj = NTLinear(hidden, config.q_lora_rank, False, dtype)
            self.q_a_layernorm = nn.RMSNorm(config.q_lora_rank, -1, eps, bias=False, dtype=dtype)
            self.q_b_proj = NTLinear(config.q_lora_rank, q_width, False, dtype)
            self.q_proj = None
        else:
            self.q_proj = NTLinear(hidden, q_width, False, dtype)
        self.kv_a_proj_with_mqa = NTLinear(hidden, self.latent + self.rope, False, dtype)
        self.kv_a_layernorm = nn.RMSNorm(self.latent, -1, eps, bias=False, dtype=dtype)
        self.kv_b_proj = FloatLinear(self.latent, self.heads * (self.nope + self.v_dim), dtype)
        self.o_proj = NTLinear(self.heads * self.v_dim, hidden, False, dtype)
        self.inv_freq = np.asarray(config.rope_inv_freq, dtype=np.float32)

    def _rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        cfg = self.config
        return op.tensor_expr_op(
            lambda a, p, f: _rope(a, p, f, cfg.rope_attention_factor, cfg.rope_interleave),
            "mla_rope",
            [x, positions, Tensor.from_const(self.inv_freq)],
        )

    def forward(
        self, hidden: Tensor, cache: PagedKVCache, layer_id: int, mode: str
    ) -> tuple[Tensor, PagedKVCache]:
        batch, seq_len, _ = hidden.shape
        tokens = batch * seq_len
        if self.q_proj is not None:
            q = self.q_proj(hidden)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden)))
        q = op.reshape(q, (batch, seq_len, self.heads, self.nope + self.rope))
        q_nope, q_pe = op.split(q, [self.nope], axis=-1)
        latent, k_pe = op.split(self.kv_a_proj_with_mqa(hidden), [self.latent], axis=-1)
        latent = self.kv_a_layernorm(latent)
        positions = cache.get_query_positions(tokens)
        q_pe = self._rotate(q_pe, positions)
        k_pe = self._rotate(op.reshape(k_pe, (batch, seq_len, 1, self.rope)), positions)
        cache = cache.append_mla_kv(
            layer_id, op.concat([op.reshape(latent, (batch, seq_len, 1, self.latent)), k_pe], 3)
        )
        scale = self.config.softmax_scale
        if mode != DECODE:
            kv = op.reshape(
                self.kv_b_proj(latent), (batch, seq_len, self.heads, self.nope + self.v_dim)
            )
            k_nope, v = op.split(kv, [self.nope], axis=-1)
            k_pe_heads = op.broadcast_to(k_pe, (batch, seq_len, self.heads, self.rope))
            out, lse = cache.self_attention(
                layer_id, op.concat([q_nope, q_pe], 3), op.concat([k_nope, k_pe_heads], 3), v, scale
            )
        if mode != PREFILL:
            w = op.reshape(self.kv_b_proj.weight, (self.heads, self.nope + self.v_dim, self.latent))
            q_flat = op.reshape(q_nope, (tokens, self.heads, self.nope))
            q_latent = op.tensor_expr_op(
                lambda x, weight: _head_matmul(x, weight, 0, self.latent, True),
                "mla_absorb_uk",
                [q_flat, w],
            )
            q_latent = op.reshape(q_latent, (batch, seq_len, self.heads, self.latent))
            cross, cross_lse = cache.cross_attention(
                layer_id, op.concat([q_latent, q_pe], 3), self.latent, scale
            )
            cross = op.tensor_expr_op(
                lambda x, weight: _head_matmul(x, weight, self.nope, self.v_dim, False),
                "mla_apply_uv",
                [op.reshape(cross, (tokens, self.heads, self.latent)), w],
            )
            cross = op.reshape(cross, (batch, seq_len, self.heads, self.v_dim))
            if mode == DECODE:
                out = cross
            else:
                cross_lse = op.reshape(cross_lse, (batch, seq_len, self.heads))
                out, _ = cache.merge_attn_output_inplace(out, lse, cross, cross_lse)
        out = op.reshape(out, (batch, seq_len, self.heads * self.v_dim))
        return self.o_proj(out), cache


def _group_mask(
    choice: te.Tensor, top_groups: te.Tensor, group_size: int, fill: float
) -> te.Tensor:
    """choice[t, e] where e's group is one of the token's top groups, else `fill`."""
    kept = top_groups.shape[1]
    j = te.reduce_axis((0, kept), name="group")
    hit = te.compute(
        choice.shape,
        lambda t, e: te.max(
            tirx.Select(top_groups[t, j] == (e // group_size).astype("int32"), 1, 0), axis=j
        ),
        name="expert_group_hit",
    )
    return te.compute(
        choice.shape,
        lambda t, e: tirx.Select(hit[t, e] > 0, choice[t, e], tirx.const(fill, "float32")),
        name="expert_group_mask",
    )


class DeepseekMoE(nn.Module):
    """Router (scores, group-limited top-k), routed experts and shared experts."""

    def __init__(self, config: DeepseekConfig, dtype: str) -> None:
        self.config = config
        self.gate = NTLinear(config.hidden_size, config.num_experts, False, dtype)
        if config.scoring == "sigmoid":
            self.gate.e_score_correction_bias = nn.Parameter((config.num_experts,), "float32")
        self.experts = StackedExperts(config, dtype)
        self.shared_experts = (
            LlamaMLP(config, dtype, config.shared_expert_intermediate_size)
            if config.shared_expert_intermediate_size
            else None
        )

    def _route(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        cfg = self.config
        logits = nt_matmul(tokens, self.gate.weight, out_dtype="float32")
        scores = op.softmax(logits, axis=-1) if cfg.scoring == "softmax" else op.sigmoid(logits)
        choice = scores
        if cfg.scoring == "sigmoid":
            choice = scores + self.gate.e_score_correction_bias
        if cfg.routes_by_group:
            group_size = cfg.num_experts // cfg.n_group
            grouped = op.reshape(choice, (tokens.shape[0], cfg.n_group, group_size))
            if cfg.topk_method == "noaux_tc":
                best_two = op.topk(grouped, 2, axis=-1, ret_type="values")
                group_scores = op.sum(best_two, axis=-1)
            else:
                group_scores = op.max(grouped, axis=-1)
            top_groups = op.topk(group_scores, cfg.topk_group, axis=-1, ret_type="indices")
            fill = float("-inf") if cfg.topk_method == "noaux_tc" else 0.0
            choice = op.tensor_expr_op(
                lambda c, g: _group_mask(c, g, group_size, fill),
                "expert_group_mask",
                [choice, top_groups],
            )
        chosen = op.topk(choice, cfg.num_experts_per_tok, axis=-1, ret_type="indices")
        weights = op.tensor_expr_op(
            lambda s, c: te.compute(c.shape, lambda t, j: s[t, c[t, j]], name="expert_weights"),
            "expert_weights",
            [scores, chosen],
        )
        if cfg.norm_topk_prob:
            weights = weights / (op.sum(weights, axis=-1, keepdims=True) + 1e-20)
        return weights * cfg.routed_scaling_factor, chosen

    def forward(self, hidden: Tensor) -> Tensor:
        batch, seq_len, width = hidden.shape
        tokens = op.reshape(hidden, (batch * seq_len, width))
        weights, chosen = self._route(tokens)
        out = self.experts(
            tokens,
            chosen,
            weights.astype(hidden.dtype),
            self.config.num_experts_per_tok,
            one_token_each(hidden),
        )
        if self.shared_experts is not None:
            out = out + self.shared_experts(tokens)
        return op.reshape(out, (batch, seq_len, width))


class DeepseekDecoderLayer(nn.Module):
    """Pre-norm MLA + (dense or expert) feed-forward, with residuals."""

    def __init__(self, config: DeepseekConfig, dtype: str, sparse: bool) -> None:
        eps = config.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(config.hidden_size, -1, eps, bias=False, dtype=dtype)
        self.self_attn = MLAAttention(config, dtype)
        self.post_attention_layernorm = nn.RMSNorm(
            config.hidden_size, -1, eps, bias=False, dtype=dtype
        )
        self.mlp = DeepseekMoE(config, dtype) if sparse else LlamaMLP(config, dtype)

    def forward(
        self, hidden: Tensor, cache: PagedKVCache, layer_id: int, mode: str
    ) -> tuple[Tensor, PagedKVCache]:
        attn, cache = self.self_attn(self.input_layernorm(hidden), cache, layer_id, mode)
        hidden = hidden + attn
        return hidden + self.mlp(self.post_attention_layernorm(hidden)), cache


class DeepseekForCausalLM(MoEForCausalLM):
    """The exported DeepSeek model: `extend` joins the llama-family contract (see above)."""

    def _make_layer(self, layer_id: int) -> nn.Module:
        return DeepseekDecoderLayer(self.config, self.dtype, layer_id in self.config.sparse_layers)

    def _forward(
        self, hidden: Tensor, cache: PagedKVCache, mode: str
    ) -> tuple[Tensor, PagedKVCache]:
        for layer_id, layer in enumerate(self.model.layers):
            hidden, cache = layer(hidden, cache, layer_id, mode)
        return self.model.norm(hidden), cache

    def _prefill_mode(
        self, input_embed: Tensor, logit_positions: Tensor, cache: PagedKVCache, mode: str
    ) -> tuple[Tensor, PagedKVCache]:
        hidden, cache = self._forward(input_embed, cache, mode)
        return self.logits(op.take(hidden, logit_positions, axis=1)), cache

    def prefill(
        self, input_embed: Tensor, logit_positions: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, PagedKVCache]:
        """Ragged prefill of sequences with nothing cached yet (self attention only)."""
        return self._prefill_mode(input_embed, logit_positions, kv_cache, PREFILL)

    def extend(
        self, input_embed: Tensor, logit_positions: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, PagedKVCache]:
        """Ragged prefill where some sequences have cached tokens (self + cross attention)."""
        return self._prefill_mode(input_embed, logit_positions, kv_cache, EXTEND)

    def decode(self, input_embed: Tensor, kv_cache: PagedKVCache) -> tuple[Tensor, PagedKVCache]:
        hidden, cache = self._forward(input_embed, kv_cache, DECODE)
        return self.logits(hidden), cache

    def _hidden_mode(
        self, input_embed: Tensor, logit_positions: Tensor, cache: PagedKVCache, mode: str
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        hidden, cache = self._forward(input_embed, cache, mode)
        return self.logits(op.take(hidden, logit_positions, axis=1)), hidden, cache

    def prefill_hidden(
        self, input_embed: Tensor, logit_positions: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        """`prefill`, and the final-norm hidden states of every token (for MTP drafting)."""
        return self._hidden_mode(input_embed, logit_positions, kv_cache, PREFILL)

    def extend_hidden(
        self, input_embed: Tensor, logit_positions: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        """`extend`, and the final-norm hidden states of every token."""
        return self._hidden_mode(input_embed, logit_positions, kv_cache, EXTEND)

    def decode_hidden(
        self, input_embed: Tensor, kv_cache: PagedKVCache
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        """`decode`, and the final-norm hidden state of every sequence's token."""
        hidden, cache = self._forward(input_embed, kv_cache, DECODE)
        return self.logits(hidden), hidden, cache

    def create_kv_cache(
        self,
        max_batch_size: tirx.Var,
        max_total_seq_len: tirx.Var,
        prefill_chunk_size: tirx.Var,
        page_size: tirx.Var,
        support_sliding_window: tirx.Var,
    ) -> PagedKVCache:
        cfg = self.config
        return mla_paged_kv_cache(
            self.target,
            max_batch_size,
            max_total_seq_len,
            prefill_chunk_size,
            page_size,
            support_sliding_window,
            num_hidden_layers=len(self.model.layers),
            num_attention_heads=cfg.num_attention_heads,
            kv_lora_rank=cfg.kv_lora_rank,
            qk_rope_head_dim=cfg.qk_rope_head_dim,
            qk_nope_head_dim=cfg.qk_nope_head_dim,
            v_head_dim=cfg.v_head_dim,
            dtype=self.dtype,
        )

    def export_spec(self) -> dict[str, Any]:
        spec = super().export_spec()
        hidden = (
            {"extend_hidden": dict(spec["prefill"]), "decode_hidden": dict(spec["decode"])}
            if self.exports_hidden_states
            else {}
        )
        return {**spec, "extend": dict(spec["prefill"]), **hidden}
