"""Hybrid Gated DeltaNet / gated-attention decoder (Qwen3-Next, Qwen3.5 / Qwen3.6 dense and
MoE) in `relax.nn`.

Each layer mixes tokens with a Gated DeltaNet layer (`linear_attn`, gated_delta_net.py) or
gated full attention (`self_attn`, gated_attention.py), then runs the dense SwiGLU (`mlp`,
Qwen3.5 dense and Qwen3-Next's `mlp_only_layers`) or the routed block with its
sigmoid-gated shared expert (`mlp`, moe.py's `SparseMoE`); the input, post-attention and
final norms are zero-centred RMSNorms. HF names are kept throughout (`model.layers.N.`).

The exported contract extends the paged one (causal_lm.py) by the recurrent state: beside
the KV cache (which holds the full-attention layers only, KV layer j being the j-th full
layer) `prefill` and `decode` take `slots` (the state slot of each sequence of the call)
and two tuples of pools, one conv pool and one recurrent pool per Gated DeltaNet layer,
which the layers update in place at those slots and which come back as outputs. A pool is
[pool_slots, row], one sequence's state a contiguous row of `state_shapes()` (what the
runtime spec's bytes size), seen inside as the layer's [pool_slots, *shape] (a view):

- `prefill(input_embed [1, n, H], logit_positions, kv_cache, seq_starts [b + 1], slots [b],
  conv_states, recurrent_states) -> (logits, kv_cache, conv_states, recurrent_states)`;
- `decode(input_embed [b, 1, H], kv_cache, slots, conv_states, recurrent_states) -> same`.

Weights: `hybrid_weight_sources` names the checkpoint tensors each parameter concatenates.
"""

from __future__ import annotations

import math
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache
from tvm.target import Target

from vllm_tvm.checkpoints.families.qwen3_next import checkpoint_name
from vllm_tvm.model_defs.causal_lm import PagedCausalLM
from vllm_tvm.model_defs.config import FULL_ATTENTION
from vllm_tvm.model_defs.gated_attention import GatedAttention, ZeroCentredRMSNorm
from vllm_tvm.model_defs.gated_delta_net import (
    STATE_DTYPE,
    GatedDeltaNet,
    ProjectionLayout,
    split_projection_sources,
)
from vllm_tvm.model_defs.layers import NTLinear, nt_matmul
from vllm_tvm.model_defs.llama import LlamaMLP
from vllm_tvm.model_defs.moe import SparseMoE, moe_weight_sources
from vllm_tvm.model_defs.qwen3_next_config import HybridConfig
from vllm_tvm.model_defs.recurrent_kernels import RecurrentKernels

States = tuple[Tensor, ...]
"""One pool per Gated DeltaNet layer, in layer order."""


class RecurrentBatch:
    """What the Gated DeltaNet layers of one call read and update: the sequences' slots,
    their row ranges (prefill only) and the pools."""

    def __init__(
        self, slots: Tensor, seq_starts: Tensor | None, conv: States, recurrent: States
    ) -> None:
        self.slots = slots
        self.seq_starts = seq_starts
        self.conv = list(conv)
        self.recurrent = list(recurrent)

    def mix(self, layer: GatedDeltaNet, index: int, hidden: Tensor) -> Tensor:
        """Run Gated DeltaNet layer number `index` (among those layers) over its pools, seen
        in the layer's state shapes (a view: a slot's row is contiguous)."""
        flat_conv, flat_recurrent = self.conv[index], self.recurrent[index]
        slots = flat_conv.shape[0]
        conv = op.reshape(flat_conv, layer.options.conv_state_shape(slots))
        recurrent = op.reshape(flat_recurrent, layer.options.recurrent_state_shape(slots))
        if self.seq_starts is None:
            out, conv, recurrent = layer.decode(hidden, self.slots, conv, recurrent)
        else:
            out, conv, recurrent = layer.prefill(
                hidden, self.seq_starts, self.slots, conv, recurrent
            )
        self.conv[index] = op.reshape(conv, flat_conv.shape)
        self.recurrent[index] = op.reshape(recurrent, flat_recurrent.shape)
        return out


class HybridDecoderLayer(nn.Module):
    """Zero-centred pre-norms around a token mixer and a dense or routed feed-forward."""

    def __init__(
        self, config: HybridConfig, dtype: str, layer: int, kernels: RecurrentKernels | None
    ) -> None:
        """`kernels`: the recurrent kernels a Gated DeltaNet layer runs (None: a full layer)."""
        eps = config.rms_norm_eps
        self.input_layernorm = ZeroCentredRMSNorm(config.hidden_size, eps, dtype)
        self.post_attention_layernorm = ZeroCentredRMSNorm(config.hidden_size, eps, dtype)
        self.is_full = config.layer_types[layer] == FULL_ATTENTION
        self.mixer_index = (config.full_layers if self.is_full else config.linear_layers).index(
            layer
        )
        """KV-cache layer id (full attention) or pool index (Gated DeltaNet)."""
        if self.is_full:
            self.self_attn = GatedAttention(config.attention_options(), dtype)
        else:
            assert kernels is not None, "a Gated DeltaNet layer needs its kernels"
            self.linear_attn = GatedDeltaNet(config.delta_net_options(), kernels, dtype)
        if layer in config.sparse_layers:
            self.mlp: nn.Module = SparseMoE(config, dtype)
        else:
            self.mlp = LlamaMLP(config, dtype)

    def forward(
        self, hidden: Tensor, kv_cache: PagedKVCache, states: RecurrentBatch | None
    ) -> Tensor:
        """`states`: the call's recurrent state (None: a full layer needs none)."""
        normed = self.input_layernorm(hidden)
        if self.is_full:
            mixed = self.self_attn(normed, kv_cache, self.mixer_index)
        else:
            assert states is not None
            mixed = states.mix(self.linear_attn, self.mixer_index, normed)
        hidden = hidden + mixed
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class HybridModel(nn.Module):
    """Embedding table, decoder stack and final norm (HF's `model.` prefix)."""

    def __init__(self, config: HybridConfig, dtype: str, kernels: RecurrentKernels) -> None:
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList(
            [
                HybridDecoderLayer(config, dtype, layer, kernels)
                for layer in range(config.num_hidden_layers)
            ]
        )
        self.norm = ZeroCentredRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)

    def forward(self, hidden: Tensor, kv_cache: PagedKVCache, states: RecurrentBatch) -> Tensor:
        for layer in self.layers:
            hidden = layer(hidden, kv_cache, states)
        return self.norm(hidden)


class HybridEmbeddingsAndHead(PagedCausalLM):
    """What the hybrid decoder and its MTP layer (qwen3_next_mtp.py) export alike, written
    once: embeddings from `model.embed_tokens`, an LM head of its own or tied to that table,
    and the gated attention's partial rotary in the paged KV cache."""

    def __init__(
        self, config: HybridConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        super().__init__(config, dtype, target, attention)
        self.model = self._make_body(config, dtype)
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else NTLinear(config.hidden_size, config.vocab_size, False, dtype)
        )

    def _make_body(self, config: HybridConfig, dtype: str) -> nn.Module:
        """The network `model` (it holds `embed_tokens`)."""
        raise NotImplementedError

    def embed(self, input_ids: Tensor) -> Tensor:
        return self.model.embed_tokens(input_ids)

    def logits(self, hidden: Tensor) -> Tensor:
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return nt_matmul(hidden, weight, out_dtype="float32")

    def cache_rope(self) -> dict[str, Any]:
        return self.config.attention_options().cache_rope()


class HybridForCausalLM(HybridEmbeddingsAndHead):
    """The exported model: the paged contract plus slots and state pools (module docstring)."""

    def __init__(
        self,
        config: HybridConfig,
        dtype: str,
        target: Target,
        attention: str = "tir",
        *,
        kernels: RecurrentKernels,
    ) -> None:
        """`kernels`: the delta-rule and conv kernels built for `target` (by the compiler)."""
        self._kernels = kernels
        super().__init__(config, dtype, target, attention)

    def _make_body(self, config: HybridConfig, dtype: str) -> nn.Module:
        return HybridModel(config, dtype, self._kernels)

    def cache_layers(self) -> dict[str, Any]:
        """The KV cache holds the full-attention layers only."""
        return {"attn_kind": ["mha"] * len(self.config.full_layers)}

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """One sequence's conv and recurrent state in one Gated DeltaNet layer (STATE_DTYPE,
        whatever the model dtype): a pool slot of each of its two pools."""
        options = self.config.delta_net_options()
        return options.conv_state_shape(1)[1:], options.recurrent_state_shape(1)[1:]

    def prefill(  # type: ignore[override]
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        kv_cache: PagedKVCache,
        seq_starts: Tensor,
        slots: Tensor,
        conv_states: States,
        recurrent_states: States,
    ) -> tuple[Tensor, PagedKVCache, States, States]:
        """Ragged prefill (sequence b at rows seq_starts[b] .. seq_starts[b + 1], its state
        at slots[b]); fp32 logits at `logit_positions`, the updated pools. The same graph as
        `prefill_hidden`, which it traces, less the hidden-state output."""
        logits, _, kv_cache, conv, recurrent = self.prefill_hidden(
            input_embed, logit_positions, kv_cache, seq_starts, slots, conv_states, recurrent_states
        )
        return logits, kv_cache, conv, recurrent

    def prefill_hidden(  # type: ignore[override]
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        kv_cache: PagedKVCache,
        seq_starts: Tensor,
        slots: Tensor,
        conv_states: States,
        recurrent_states: States,
    ) -> tuple[Tensor, Tensor, PagedKVCache, States, States]:
        """`prefill`, and the final-norm hidden states of every token [1, n, hidden] (what
        the checkpoint's MTP layer reads: qwen3_next_mtp.py)."""
        states = RecurrentBatch(slots, seq_starts, conv_states, recurrent_states)
        hidden = self.model(input_embed, kv_cache, states)
        logits = self.logits(op.take(hidden, logit_positions, axis=1))
        return logits, hidden, kv_cache, tuple(states.conv), tuple(states.recurrent)

    def decode(  # type: ignore[override]
        self,
        input_embed: Tensor,
        kv_cache: PagedKVCache,
        slots: Tensor,
        conv_states: States,
        recurrent_states: States,
    ) -> tuple[Tensor, PagedKVCache, States, States]:
        """One token for each of `batch` sequences (state at slots[b]); fp32 logits."""
        states = RecurrentBatch(slots, None, conv_states, recurrent_states)
        hidden = self.model(input_embed, kv_cache, states)
        return self.logits(hidden), kv_cache, tuple(states.conv), tuple(states.recurrent)

    def decode_single(  # type: ignore[override]
        self,
        input_embed: Tensor,
        kv_cache: PagedKVCache,
        slots: Tensor,
        conv_states: States,
        recurrent_states: States,
    ) -> tuple[Tensor, PagedKVCache, States, States]:
        return self.decode(input_embed, kv_cache, slots, conv_states, recurrent_states)

    def _pool_specs(self, batch: int | str) -> dict[str, Any]:
        """`slots` of a call of `batch` sequences and every Gated DeltaNet layer's pools, each
        [pool_slots, row]: one sequence's state a contiguous row (the runtime spec's bytes)."""
        layers = len(self.config.linear_layers)
        conv, recurrent = (
            nn.spec.Tensor(["pool_slots", math.prod(shape)], STATE_DTYPE)
            for shape in self.state_shapes()
        )
        return {
            "slots": nn.spec.Tensor([batch], "int32"),
            "conv_states": [conv] * layers,
            "recurrent_states": [recurrent] * layers,
        }

    def export_spec(self) -> dict[str, Any]:
        """The paged signatures (causal_lm.py) with the slots and pools appended."""
        paged = super().export_spec()

        def extended(name: str, batch: int | str, extra: dict[str, Any]) -> dict[str, Any]:
            arguments = {k: v for k, v in paged[name].items() if k != "$"}
            return {**arguments, **extra, **self._pool_specs(batch), "$": paged[name]["$"]}

        starts = {"seq_starts": nn.spec.Tensor(["batch_plus_one"], "int32")}
        hidden = (
            {"prefill_hidden": extended("prefill_hidden", "batch_size", starts)}
            if self.exports_hidden_states
            else {}
        )
        return {
            "embed": paged["embed"],
            "prefill": extended("prefill", "batch_size", starts),
            **hidden,
            "decode": extended("decode", "batch_size", {}),
            "decode_single": extended("decode_single", 1, {}),
            "create_kv_cache": paged["create_kv_cache"],
        }


def hybrid_weight_sources(config: HybridConfig, param_name: str) -> tuple[list[str], int]:
    """Checkpoint tensors whose concatenation along axis 0 is `param_name`: Qwen3.5's split
    Gated DeltaNet projections, else the MoE and llama-family fusions (q/k/v, gate/up,
    stacked experts); a multimodal checkpoint's decoder under its text-tower prefix."""
    sources, axis = [param_name], 0
    if ProjectionLayout(config.projection_layout) is ProjectionLayout.CONCATENATED:
        sources, axis = split_projection_sources(param_name)
    if sources == [param_name]:
        sources, axis = moe_weight_sources(config, param_name)
    return [checkpoint_name(config.architecture, source) for source in sources], axis
