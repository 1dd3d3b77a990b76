"""Mixture-of-experts decoder (Mixtral, Qwen2-MoE, Qwen3-MoE) on the llama-family attention.

The expert layer never expands experts to a dense product, and a step reads only the weights
of the experts its tokens chose:

1. route: fp32 router logits, softmax, top-k, optional renormalisation (as transformers);
2. the (token, slot) pairs are sorted by expert (`argsort` of the chosen expert ids), so the
   rows of one expert are contiguous;
3. `expert_nt_matmul` computes row r of the sorted pairs against the stacked weight rows of
   its own expert only, gathering the token's hidden row by index. The CPU matmul rule
   (schedules/cpu_matmul.py) runs it feature block by feature block over the sorted rows, so
   in prefill one expert's weight block is reused by all its tokens while it is in cache,
   and a decode step touches k experts per token and nothing else. On CUDA the products
   carry their phase (EXPERT_PHASE) for schedules/gpu_expert.py: a warp gather-GEMV per
   sorted pair in decode, blocks of consecutive sorted pairs (one expert's rows) in prefill;
4. the rows are weighted and summed back per token through the inverse permutation.

Expert weights are stacked once, at load, into one [experts * rows, in] matrix per
projection (the loader concatenates the checkpoint's per-expert tensors: `weight_sources`).
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache
from tvm.target import Target

from vllm_tvm.model_defs.config import ModelConfigError
from vllm_tvm.model_defs.layers import ACCUMULATION_DTYPE, NTLinear, nt_matmul
from vllm_tvm.model_defs.llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaMLP,
    fused_weight_sources,
)
from vllm_tvm.model_defs.moe_config import MoEConfig

EXPERT_PROJECTIONS = ("gate_up_proj", "down_proj")
"""The stacked parameters of a layer's `experts`."""
SHARED_EXPERT_NAMES = ("shared_expert", "shared_experts")
"""HF names of the always-on expert (Qwen2-MoE) / experts (DeepSeek)."""
SHARED_GATE_UP = ("gate_proj", "up_proj")
"""The checkpoint tensors of the shared expert's fused gate/up projection."""
EXPERT_PHASE = "vllm_tvm.expert_phase"
"""Block annotation of an expert product: DECODE or PREFILL (schedules/gpu_expert.py reads
it; an annotation, not a name, since TVM merges functions equal but for their names)."""
DECODE, PREFILL = "decode", "prefill"
EXPERT_TARGET_KINDS = ("llvm", "cuda")
"""Target kinds whose expert kernels are built and checked."""


def one_token_each(hidden: Tensor) -> bool:
    """hidden [batch, seq_len, H] is a decode step: seq_len is the static 1."""
    seq_len = hidden.shape[1]
    return isinstance(seq_len, int | tirx.IntImm) and int(seq_len) == 1


def _expert_nt_matmul(
    x: te.Tensor,
    weight: te.Tensor,
    order: te.Tensor,
    experts: te.Tensor,
    top_k: int,
    features: int,
    gather_tokens: bool,
    phase: str,
) -> te.Tensor:
    """out[r, n] = sum_k x[row(r), k] * weight[expert(r) * features + n, k], fp32 sums.

    Pair r of the expert-sorted order is slot `order[r]` of the flattened [tokens, top_k]
    choice; its expert is `experts[order[r]]`, its token row `order[r] // top_k` when
    `gather_tokens` (the first projection reads token rows), else r (the rows are already
    in sorted order). The product's block carries EXPERT_PHASE: `phase` (GPU schedules differ)."""
    reduce_len = x.shape[-1]
    k = te.reduce_axis((0, reduce_len), name="k")

    def dot(r: tirx.Var, n: tirx.Var) -> tirx.PrimExpr:
        slot = order[r].astype("int64")
        row = tirx.floordiv(slot, top_k) if gather_tokens else r
        weight_row = experts[slot].astype("int64") * features + n
        return te.sum(
            x[row, k].astype(ACCUMULATION_DTYPE) * weight[weight_row, k].astype(ACCUMULATION_DTYPE),
            axis=k,
        )

    acc = te.compute(
        (order.shape[0], features),
        dot,
        name="expert_nt_matmul_acc",
        attrs={EXPERT_PHASE: phase},
    )
    if x.dtype == ACCUMULATION_DTYPE:
        return acc
    return te.compute(acc.shape, lambda *i: acc[i].astype(x.dtype), name="expert_nt_matmul")


def _combine(rows: te.Tensor, weights: te.Tensor, inverse: te.Tensor) -> te.Tensor:
    """out[t, n] = sum_j weights[t, j] * rows[inverse[t * top_k + j], n]."""
    top_k = weights.shape[1]
    j = te.reduce_axis((0, top_k), name="slot")

    def weighted(t: tirx.Var, n: tirx.Var) -> tirx.PrimExpr:
        row = inverse[t * top_k + j].astype("int64")
        return te.sum(
            weights[t, j].astype(ACCUMULATION_DTYPE) * rows[row, n].astype(ACCUMULATION_DTYPE),
            axis=j,
        )

    acc = te.compute((weights.shape[0], rows.shape[1]), weighted, name="expert_combine")
    return te.compute(acc.shape, lambda *i: acc[i].astype(rows.dtype), name="expert_output")


class StackedExperts(nn.Module):
    """All routed experts of a layer: gate/up stacked [experts * 2I, H], down [experts * H, I]."""

    def __init__(self, config: MoEConfig, dtype: str) -> None:
        self.intermediate = config.moe_intermediate_size
        self.hidden = config.hidden_size
        experts = config.num_experts
        self.gate_up_proj = nn.Parameter((experts * 2 * self.intermediate, self.hidden), dtype)
        self.down_proj = nn.Parameter((experts * self.hidden, self.intermediate), dtype)

    def forward(
        self, tokens: Tensor, chosen: Tensor, weights: Tensor, top_k: int, decode: bool
    ) -> Tensor:
        """tokens [T, H], chosen experts [T, top_k] int32, their weights [T, top_k]; `decode`:
        one token per sequence (the GPU schedules a gather-GEMV, else tokens grouped by
        expert)."""
        phase = DECODE if decode else PREFILL
        slots = op.reshape(chosen, (chosen.shape[0] * top_k,))
        order = op.argsort(slots, dtype="int32")
        gate_up = op.tensor_expr_op(
            lambda x, w, o, e: _expert_nt_matmul(
                x, w, o, e, top_k, 2 * self.intermediate, True, phase
            ),
            "expert_nt_matmul",
            [tokens, self.gate_up_proj, order, slots],
        )
        gate, up = op.split(gate_up, 2, axis=-1)
        down = op.tensor_expr_op(
            lambda x, w, o, e: _expert_nt_matmul(x, w, o, e, top_k, self.hidden, False, phase),
            "expert_nt_matmul",
            [op.silu(gate) * up, self.down_proj, order, slots],
        )
        inverse = op.argsort(order, dtype="int32")
        return op.tensor_expr_op(_combine, "expert_combine", [down, weights, inverse])


def _one_feature(tokens: Tensor, weight: Tensor) -> Tensor:
    """tokens [T, H] times the one-row weight [1, H]: [T, 1], summed in fp32 and cast back.

    A reduction over H rather than a product with one output feature, which dlight's GPU
    GEMV rule cannot schedule (it fuses the output-feature loops, and there are none)."""
    row = op.astype(weight, ACCUMULATION_DTYPE)
    dot = op.sum(op.astype(tokens, ACCUMULATION_DTYPE) * row, axis=-1, keepdims=True)
    return op.astype(dot, tokens.dtype)


class SparseMoE(nn.Module):
    """Router, routed experts and (Qwen2-MoE) the sigmoid-gated shared expert."""

    def __init__(self, config: MoEConfig, dtype: str) -> None:
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = NTLinear(config.hidden_size, config.num_experts, False, dtype)
        self.experts = StackedExperts(config, dtype)
        if config.shared_expert_intermediate_size:
            self.shared_expert = LlamaMLP(config, dtype, config.shared_expert_intermediate_size)
            self.shared_expert_gate = NTLinear(config.hidden_size, 1, False, dtype)
        else:
            self.shared_expert = None
            self.shared_expert_gate = None

    def forward(self, hidden: Tensor) -> Tensor:
        batch, seq_len, width = hidden.shape
        tokens = op.reshape(hidden, (batch * seq_len, width))
        probs = op.softmax(nt_matmul(tokens, self.gate.weight, out_dtype="float32"), axis=-1)
        weights, chosen = op.topk(probs, self.top_k, axis=-1, ret_type="both", dtype="int32")
        if self.norm_topk_prob:
            weights = weights / op.sum(weights, axis=-1, keepdims=True)
        out = self.experts(
            tokens, chosen, weights.astype(hidden.dtype), self.top_k, one_token_each(hidden)
        )
        if self.shared_expert is not None:
            gate = op.sigmoid(_one_feature(tokens, self.shared_expert_gate.weight))
            out = out + gate * self.shared_expert(tokens)
        return op.reshape(out, (batch, seq_len, width))


class MoEDecoderLayer(nn.Module):
    """Pre-norm attention + expert block with residuals (the block keeps its HF name)."""

    def __init__(self, config: MoEConfig, dtype: str, layer_id: int) -> None:
        eps = config.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(config.hidden_size, -1, eps, bias=False, dtype=dtype)
        self.self_attn = LlamaAttention(config, dtype, layer_id)
        self.post_attention_layernorm = nn.RMSNorm(
            config.hidden_size, -1, eps, bias=False, dtype=dtype
        )
        self.block_name = config.expert_block_name
        setattr(self, self.block_name, SparseMoE(config, dtype))

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, layer_id: int) -> Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), kv_cache, layer_id)
        block = getattr(self, self.block_name)
        return hidden + block(self.post_attention_layernorm(hidden))


class MoEForCausalLM(LlamaForCausalLM):
    """The llama-family exported model with expert layers at `config.sparse_layers`."""

    owned_kv_ready = False

    def __init__(
        self, config: MoEConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        if target.kind.name not in EXPERT_TARGET_KINDS:
            raise ModelConfigError(
                f"{config.architecture} compiles for CPU (llvm) and CUDA only; expert kernels "
                f"for '{target.kind.name}' are not built yet"
            )
        super().__init__(config, dtype, target, attention)

    def _make_layer(self, layer_id: int) -> nn.Module:
        if layer_id in self.config.sparse_layers:
            return MoEDecoderLayer(self.config, self.dtype, layer_id)
        return LlamaDecoderLayer(self.config, self.dtype, layer_id)


def moe_weight_sources(config: MoEConfig, param_name: str) -> tuple[list[str], int]:
    """Checkpoint tensors whose concatenation along axis 0 is `param_name`.

    A stacked expert projection is every expert's tensor in expert order (gate and up
    interleaved per expert, so expert e's rows are [gate_e; up_e]); the rest is llama's."""
    for shared in SHARED_EXPERT_NAMES:
        marker = f".{shared}.gate_up_proj."
        if marker in param_name:
            prefix, suffix = param_name.split(marker)
            return [f"{prefix}.{shared}.{part}.{suffix}" for part in SHARED_GATE_UP], 0
    prefix, _, projection = param_name.rpartition(".experts.")
    if projection not in EXPERT_PROJECTIONS:
        return fused_weight_sources(param_name)
    gate, up, down = config.expert_projection_names
    parts = (gate, up) if projection == "gate_up_proj" else (down,)
    return [
        f"{prefix}.experts.{expert}.{part}.weight"
        for expert in range(config.num_experts)
        for part in parts
    ], 0
