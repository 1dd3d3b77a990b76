"""DeepSeek-V3's multi-token-prediction (MTP) layer as a model of its own, the proposer of
speculative method `mtp`.

Why a definition of its own: the layer is stored in the target's checkpoint as layer
`num_hidden_layers` (`model.layers.N.*`), but it is not a step of the target's stack. At
position p it reads token p + 1 and the target's final-norm hidden state at p:
eh_proj(concat(enorm(embed(token)), hnorm(hidden))) through a full decoder layer (latent
attention, and experts or a dense feed-forward as the config's other layers beyond
`first_k_dense_replace`), whose output both predicts token p + 2 through
`shared_head.norm` and `shared_head.head` and is the hidden state the next draft reads
(vLLM's deepseek_mtp.py). It is built from the target's config, with one latent-attention
layer in its own paged KV cache, and exports the target's three forwards (`prefill`,
`extend`, `decode`: deepseek.py), each taking the input hidden states next to the
embeddings and returning the output hidden states next to the logits. Its embedding table
is the checkpoint's `model.layers.N.embed_tokens` when present, else the target's (the
runtime shares it).
"""

from __future__ import annotations

from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache
from tvm.target import Target

from vllm_tvm.model_defs.deepseek import (
    DECODE,
    EXTEND,
    PREFILL,
    DeepseekDecoderLayer,
    DeepseekForCausalLM,
)
from vllm_tvm.model_defs.deepseek_config import DeepseekConfig
from vllm_tvm.model_defs.layers import NTLinear, nt_matmul
from vllm_tvm.model_defs.moe import moe_weight_sources


class SharedHead(nn.Module):
    """The layer's own final norm and LM head."""

    def __init__(self, config: DeepseekConfig, dtype: str) -> None:
        eps = config.rms_norm_eps
        self.norm = nn.RMSNorm(config.hidden_size, -1, eps, bias=False, dtype=dtype)
        self.head = NTLinear(config.hidden_size, config.vocab_size, False, dtype)


class MTPBody(nn.Module):
    """Embedding table, the two input norms, eh_proj, the decoder layer and shared head."""

    def __init__(self, config: DeepseekConfig, dtype: str) -> None:
        size, eps = config.hidden_size, config.rms_norm_eps
        self.embed_tokens = nn.Embedding(config.vocab_size, size, dtype=dtype)
        self.enorm = nn.RMSNorm(size, -1, eps, bias=False, dtype=dtype)
        self.hnorm = nn.RMSNorm(size, -1, eps, bias=False, dtype=dtype)
        self.eh_proj = NTLinear(2 * size, size, False, dtype)
        self.layers = nn.ModuleList(
            [DeepseekDecoderLayer(config, dtype, sparse=bool(config.sparse_layers))]
        )
        self.shared_head = SharedHead(config, dtype)

    def forward(
        self, embeddings: Tensor, hidden: Tensor, cache: PagedKVCache, mode: str
    ) -> tuple[Tensor, PagedKVCache]:
        fused = op.concat([self.enorm(embeddings), self.hnorm(hidden)], dim=-1)
        return self.layers[0](self.eh_proj(fused), cache, 0, mode)


class DeepseekMTP(DeepseekForCausalLM):
    """The exported MTP layer (module doc)."""

    def __init__(
        self, config: DeepseekConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        super().__init__(config, dtype, target, attention)
        self.model = MTPBody(config, dtype)
        self.lm_head = None

    def logits(self, hidden: Tensor) -> Tensor:
        head = self.model.shared_head
        return nt_matmul(head.norm(hidden), head.head.weight, out_dtype="float32")

    def _ragged(
        self, embeds: Tensor, hidden: Tensor, positions: Tensor, cache: PagedKVCache, mode: str
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        out, cache = self.model(embeds, hidden, cache, mode)
        out = op.take(out, positions, axis=1)
        return self.logits(out), out, cache

    def prefill(  # type: ignore[override]
        self, input_embed: Tensor, input_hidden: Tensor, logit_positions: Tensor, kv_cache: Any
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        return self._ragged(input_embed, input_hidden, logit_positions, kv_cache, PREFILL)

    def extend(  # type: ignore[override]
        self, input_embed: Tensor, input_hidden: Tensor, logit_positions: Tensor, kv_cache: Any
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        return self._ragged(input_embed, input_hidden, logit_positions, kv_cache, EXTEND)

    def decode(  # type: ignore[override]
        self, input_embed: Tensor, input_hidden: Tensor, kv_cache: Any
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        out, cache = self.model(input_embed, input_hidden, kv_cache, DECODE)
        return self.logits(out), out, cache

    def export_spec(self) -> dict[str, Any]:
        spec = super().export_spec()
        size = self.config.hidden_size
        for name in (PREFILL, EXTEND, DECODE):
            rows = [1, "seq_len"] if name != DECODE else ["batch_size", 1]
            entries = dict(spec[name])
            spec[name] = {
                "input_embed": entries.pop("input_embed"),
                "input_hidden": nn.spec.Tensor([*rows, size], self.dtype),
                **entries,
            }
        del spec["decode_single"]
        return spec


def mtp_weight_sources(config: DeepseekConfig, param_name: str) -> tuple[list[str], int]:
    """Checkpoint names of an MTP parameter: under `model.layers.N.` (N the target's layer
    count), the decoder layer's as the target's layers are named."""
    layer = f"model.layers.{config.num_hidden_layers}."
    name = param_name.removeprefix("model.")
    return moe_weight_sources(config, layer + name.removeprefix("layers.0."))
