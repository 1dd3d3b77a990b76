"""An EAGLE-3 head (EAGLE's own layout, `LlamaForCausalLMEagle3`, which vLLM runs as
Eagle3LlamaForCausalLM, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): one decoder layer that
predicts the target's next tokens from three of the target's intermediate hidden states.

Why its own definition: unlike an EAGLE-1 head (eagle.py) it reads no final hidden state
but the inputs of three target layers (checkpoints/eagle3_config.py), and
its layer attends over twice the hidden width:
- `fc` [h, 3h], no bias, turns the three target states of position p into one hidden
  state g (only for rows the target computed; a draft's row carries the head's own output);
- the layer ("midlayer" in the checkpoint) runs attention over
  concat(input_layernorm(embed(token p + 1)), hidden_norm(g)) (q/k/v read 2h), its residual
  being g (hidden_norm(g) when the config sets `norm_before_residual`), then the Llama MLP;
- its output before the final `norm` is what vLLM's proposer feeds back as the hidden state
  of the next draft; after `norm`, its own `lm_head` [draft_vocab_size, h] gives logits
  over a draft vocabulary whose entry i is the target's token i + d2t[i] (the runtime maps
  them: runtime/speculative/eagle3_head.py).
The exported functions, the EAGLE-1 head's but for the widths:
- `prefill(input_embed [1, n, h], input_hidden [1, n, 3h], logit_positions, kv_cache)` ->
  (draft logits [1, m, draft_vocab_size], pre-norm output [1, m, h]) at the positions;
- `decode(input_embed [b, 1, h], input_hidden [b, 1, h], kv_cache)` -> the same per row,
  its hidden input being the head's own output before (no fc).
Embeddings are the target's unless the checkpoint carries `embed_tokens`; the LM head is
the target's only when the draft vocabulary is the whole vocabulary and the checkpoint has
none (runtime/speculative/head_runner.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache
from tvm.target import Target

from vllm_tvm.checkpoints.eagle3_config import (
    EAGLE3_AUX_LAYER_COUNT,
    EAGLE3_AUX_LAYERS_KEY,
    EAGLE3_LAYER_PREFIX,
)
from vllm_tvm.model_defs.config import (
    LlamaFamilyConfig,
    ModelConfigError,
    parse_llama_family_config,
)
from vllm_tvm.model_defs.eagle import EagleHead
from vllm_tvm.model_defs.layers import NTLinear, make_rms_norm
from vllm_tvm.model_defs.llama import LlamaAttention, LlamaMLP, fused_weight_sources


@dataclass(frozen=True)
class Eagle3HeadConfig(LlamaFamilyConfig):
    """A Llama layer's shape plus what makes it an EAGLE-3 head."""

    draft_vocab_size: int = 0
    """Rows of the head's LM head (the target's vocabulary size when the config has none)."""
    norm_before_residual: bool = False
    """The layer's residual is hidden_norm(g) instead of g (vLLM's config switch)."""
    eagle_aux_hidden_state_layer_ids: tuple[int, ...] = ()
    """The target layers the config names; empty: vLLM's default for the target."""


def parse_eagle3_head_config(
    config: dict[str, Any], max_model_len: int | None = None
) -> Eagle3HeadConfig:
    """An EAGLE-3 head's config.json, refusing by name what vLLM's head runs differently
    than this definition: several layers, a head narrower than its target (`target_hidden_size`),
    no aux hidden states (`use_aux_hidden_state` false)."""
    layers = config.get("num_hidden_layers")
    if layers != 1:
        raise ModelConfigError(f"EAGLE-3 heads of {layers} layers are not supported; supported: 1")
    size, target_size = config.get("hidden_size"), config.get("target_hidden_size")
    if target_size is not None and target_size != size:
        raise ModelConfigError(
            f"an EAGLE-3 head of hidden size {size} over a target of {target_size} "
            "(target_hidden_size) is not supported; supported: the target's hidden size"
        )
    if (config.get("eagle_config") or {}).get("use_aux_hidden_state", True) is False:
        raise ModelConfigError(
            "EAGLE-3 heads without aux hidden states (eagle_config.use_aux_hidden_state "
            "false) are not supported"
        )
    base = parse_llama_family_config(config, max_model_len)
    return Eagle3HeadConfig(
        **{item.name: getattr(base, item.name) for item in fields(base)},
        draft_vocab_size=int(config.get("draft_vocab_size") or base.vocab_size),
        norm_before_residual=bool(config.get("norm_before_residual", False)),
        eagle_aux_hidden_state_layer_ids=tuple(config.get(EAGLE3_AUX_LAYERS_KEY) or ()),
    )


class Eagle3Layer(nn.Module):
    """The head's decoder layer (module doc): attention over [embedding, hidden], MLP."""

    def __init__(self, config: Eagle3HeadConfig, dtype: str) -> None:
        size = config.hidden_size
        self.input_layernorm = make_rms_norm(config, size, dtype)
        self.hidden_norm = make_rms_norm(config, size, dtype)
        self.self_attn = LlamaAttention(config, dtype, 0)
        self.self_attn.qkv_proj = NTLinear(
            2 * size, self.self_attn.qkv_proj.out_features, config.qkv_bias, dtype
        )
        self.post_attention_layernorm = make_rms_norm(config, size, dtype)
        self.mlp = LlamaMLP(config, dtype)
        self.norm_before_residual = config.norm_before_residual

    def forward(self, embeddings: Tensor, hidden: Tensor, kv_cache: PagedKVCache) -> Tensor:
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        both = op.concat([self.input_layernorm(embeddings), normed], dim=-1)
        residual = residual + self.self_attn(both, kv_cache, 0)
        return residual + self.mlp(self.post_attention_layernorm(residual))


class Eagle3Body(nn.Module):
    """Embedding table, fc, the layer and the final norm (the checkpoint's names, under
    `model.`, the layer as `layers.0`)."""

    def __init__(self, config: Eagle3HeadConfig, dtype: str) -> None:
        size = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, size, dtype=dtype)
        self.fc = NTLinear(EAGLE3_AUX_LAYER_COUNT * size, size, False, dtype)
        self.layers = nn.ModuleList([Eagle3Layer(config, dtype)])
        self.norm = make_rms_norm(config, size, dtype)

    def forward(self, embeddings: Tensor, hidden: Tensor, kv_cache: PagedKVCache) -> Tensor:
        return self.layers[0](embeddings, hidden, kv_cache)


class Eagle3Head(EagleHead):
    """The exported head (module doc): the EAGLE-1 head's functions over this body."""

    def __init__(
        self, config: Eagle3HeadConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        super().__init__(config, dtype, target, attention)
        self.model = Eagle3Body(config, dtype)
        self.lm_head = NTLinear(config.hidden_size, config.draft_vocab_size, False, dtype)

    def logits(self, hidden: Tensor) -> Tensor:
        """fp32 draft-vocabulary logits of the layer's pre-norm output."""
        return super().logits(self.model.norm(hidden))

    def target_features(self, input_hidden: Tensor) -> Tensor:
        """fc over the target's three hidden states."""
        return self.model.fc(input_hidden)

    def export_spec(self) -> dict[str, Any]:
        spec = super().export_spec()
        width = EAGLE3_AUX_LAYER_COUNT * self.config.hidden_size
        spec["prefill"]["input_hidden"] = nn.spec.Tensor([1, "seq_len", width], self.dtype)
        return spec


def eagle3_weight_sources(param_name: str) -> tuple[list[str], int]:
    """Checkpoint names of a head parameter: no `model.` prefix, the layer as `midlayer.`."""
    name = param_name.removeprefix("model.")
    return fused_weight_sources(name.replace("layers.0.", EAGLE3_LAYER_PREFIX, 1))
