"""The multi-token-prediction (MTP) layer of Qwen3-Next and Qwen3.5 / Qwen3.6 checkpoints as a
model of its own, the proposer of speculative method `mtp` for those hybrids.

Why a definition of its own: the checkpoints store the layer beside the decoder, under
`mtp.` (`mtp.fc`, `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.layers.0.*`,
`mtp.norm`; transformers does not load it, vLLM's qwen3_next_mtp.py / qwen3_5_mtp.py read it),
and it is not a step of the target's stack. At position p it reads token p + 1 and the
target's final-norm hidden state at p: fc(concat(pre_fc_norm_embedding(embed(token)),
pre_fc_norm_hidden(hidden))) through one decoder layer of gated full attention (its own
paged KV cache, the target's partial rotary) and the feed-forward the target's layer 0
has (routed with the shared expert, or dense, by the checkpoint's own rule), then the
zero-centred `norm`. That normed output both predicts token p + 2 through the target's LM
head (tied models: the embedding table) and is the hidden state the next draft reads. No
position is masked (DeepSeek's MTP zeroes position 0's embedding; this one does not).

The exported contract is the head's (deepseek_mtp.py's): `prefill(input_embed,
input_hidden, logit_positions, kv_cache) -> (logits, output hidden at the positions,
kv_cache)` and `decode(input_embed, input_hidden, kv_cache) -> (logits, output hidden,
kv_cache)`. Embeddings and LM head are the checkpoint's `model.embed_tokens` / `lm_head`
when present, else the target's (the runtime shares them: a multimodal checkpoint's text
tower, a tied head).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache

from vllm_tvm.model_defs.config import FULL_ATTENTION
from vllm_tvm.model_defs.gated_attention import ZeroCentredRMSNorm
from vllm_tvm.model_defs.layers import NTLinear
from vllm_tvm.model_defs.moe import moe_weight_sources
from vllm_tvm.model_defs.qwen3_next import HybridDecoderLayer, HybridEmbeddingsAndHead
from vllm_tvm.model_defs.qwen3_next_config import HybridConfig

MTP_LAYER_COUNT_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
"""How Qwen3-Next and Qwen3.5 configs say how many MTP layers the checkpoint holds."""
MTP_PREFIX = "mtp."
"""Where hybrid checkpoints keep the MTP layer's tensors (the `model.` names otherwise)."""
SHARED_WITH_TARGET = ("model.embed_tokens.weight", "lm_head.weight")
"""The head's parameters named as the target's (supplied by it when the checkpoint lacks them)."""


def check_one_mtp_layer(config: dict[str, Any]) -> None:
    """Refuse by name a decoder config with more than one MTP layer: vLLM runs layer
    (draft index mod layers), this definition holds one."""
    for key in MTP_LAYER_COUNT_KEYS:
        count = int(config.get(key) or 1)
        if count > 1:
            raise ValueError(f"{key}={count}: MTP drafting supports checkpoints with one MTP layer")


def mtp_layer_config(config: HybridConfig) -> HybridConfig:
    """The config of the MTP's one decoder layer: full attention, and routed exactly when
    the target's layer 0 is (vLLM builds the layer with index 0, so the checkpoint's
    `mlp_only_layers` / `decoder_sparse_step` rule of layer 0 applies)."""
    return replace(
        config,
        layer_types=(FULL_ATTENTION,),
        sparse_layers=(0,) if 0 in config.sparse_layers else (),
    )


class HybridMTPBody(nn.Module):
    """Embedding table, the two input norms, fc, the decoder layer and the final norm."""

    def __init__(self, config: HybridConfig, dtype: str) -> None:
        size, eps = config.hidden_size, config.rms_norm_eps
        self.embed_tokens = nn.Embedding(config.vocab_size, size, dtype=dtype)
        self.pre_fc_norm_embedding = ZeroCentredRMSNorm(size, eps, dtype)
        self.pre_fc_norm_hidden = ZeroCentredRMSNorm(size, eps, dtype)
        self.fc = NTLinear(2 * size, size, False, dtype)
        self.layers = nn.ModuleList([HybridDecoderLayer(mtp_layer_config(config), dtype, 0, None)])
        self.norm = ZeroCentredRMSNorm(size, eps, dtype)

    def forward(self, embeddings: Tensor, hidden: Tensor, cache: PagedKVCache) -> Tensor:
        fused = op.concat(
            [self.pre_fc_norm_embedding(embeddings), self.pre_fc_norm_hidden(hidden)], dim=-1
        )
        return self.norm(self.layers[0](self.fc(fused), cache, None))


class HybridMTP(HybridEmbeddingsAndHead):
    """The exported MTP layer (module doc)."""

    def _make_body(self, config: HybridConfig, dtype: str) -> nn.Module:
        return HybridMTPBody(config, dtype)

    def cache_layers(self) -> dict[str, Any]:
        """The head's own cache holds its one attention layer."""
        return {"attn_kind": ["mha"]}

    def prefill(  # type: ignore[override]
        self, input_embed: Tensor, input_hidden: Tensor, logit_positions: Tensor, kv_cache: Any
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        out = op.take(self.model(input_embed, input_hidden, kv_cache), logit_positions, axis=1)
        return self.logits(out), out, kv_cache

    def decode(  # type: ignore[override]
        self, input_embed: Tensor, input_hidden: Tensor, kv_cache: Any
    ) -> tuple[Tensor, Tensor, PagedKVCache]:
        out = self.model(input_embed, input_hidden, kv_cache)
        return self.logits(out), out, kv_cache

    def export_spec(self) -> dict[str, Any]:
        spec = super().export_spec()
        size = self.config.hidden_size
        for name in ("prefill", "decode"):
            rows = [1, "seq_len"] if name == "prefill" else ["batch_size", 1]
            entries = dict(spec[name])
            spec[name] = {
                "input_embed": entries.pop("input_embed"),
                "input_hidden": nn.spec.Tensor([*rows, size], self.dtype),
                **entries,
            }
        del spec["decode_single"]
        return spec


def hybrid_mtp_weight_sources(config: HybridConfig, param_name: str) -> tuple[list[str], int]:
    """Checkpoint names of an MTP parameter: the shared ones as the target's decoder names
    them (text checkpoints; absent ones come from the target), the rest under `mtp.` with
    the target's fusions (q/k/v, gate/up, stacked experts)."""
    if param_name in SHARED_WITH_TARGET:
        return [param_name], 0
    sources, axis = moe_weight_sources(config, param_name)
    return [MTP_PREFIX + source.removeprefix("model.") for source in sources], axis
