"""The description of a hybrid Gated DeltaNet / gated-attention decoder (Qwen3-Next,
Qwen3.5 / Qwen3.6 dense and MoE), read from the text config.

Why a subclass of `MoEConfig`: the feed-forward half of a hybrid layer is the dense SwiGLU
(`LlamaMLP`) or the routed block with its sigmoid-gated shared expert (`SparseMoE`), both
of which read the llama-family / MoE fields; this record adds what the token mixers need
(the `linear_*` shape of the Gated DeltaNet layers, which layers are full attention) and
hands each layer its options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_tvm.checkpoints.families.qwen3_next import (
    QWEN3_5,
    QWEN3_5_MOE,
    QWEN3_NEXT,
    decoder_architecture,
    decoder_config,
)
from vllm_tvm.model_defs.config import FULL_ATTENTION, ModelConfigError
from vllm_tvm.model_defs.gated_attention import GatedAttentionOptions
from vllm_tvm.model_defs.gated_delta_net import GatedDeltaNetOptions, ProjectionLayout
from vllm_tvm.model_defs.moe_config import MoEConfig

LINEAR_ATTENTION = "linear_attention"
DEFAULT_FULL_ATTENTION_INTERVAL = 4
"""transformers' default: every fourth layer is full attention."""
DEFAULT_PARTIAL_ROTARY_FACTOR = 0.25
PROJECTION_LAYOUTS = {
    QWEN3_NEXT: ProjectionLayout.GROUPED,
    QWEN3_5: ProjectionLayout.CONCATENATED,
    QWEN3_5_MOE: ProjectionLayout.CONCATENATED,
}
"""How each architecture's checkpoints lay out the Gated DeltaNet input projections."""


@dataclass(frozen=True)
class HybridConfig(MoEConfig):
    """A decoder whose layers are Gated DeltaNet (`linear_attention`) or gated full
    attention (`full_attention`), each followed by a dense or routed feed-forward."""

    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 4
    projection_layout: str = ProjectionLayout.GROUPED.value

    @property
    def decoder_architecture(self) -> str:
        """The causal-LM architecture of the decoder (a multimodal checkpoint's text tower)."""
        return decoder_architecture(self.architecture)

    @property
    def full_layers(self) -> tuple[int, ...]:
        """The full-attention layers; the paged KV cache holds these only, in this order."""
        return tuple(i for i, kind in enumerate(self.layer_types) if kind == FULL_ATTENTION)

    @property
    def linear_layers(self) -> tuple[int, ...]:
        """The Gated DeltaNet layers; the state pools hold these only, in this order."""
        return tuple(i for i, kind in enumerate(self.layer_types) if kind == LINEAR_ATTENTION)

    def delta_net_options(self) -> GatedDeltaNetOptions:
        return GatedDeltaNetOptions(
            hidden_size=self.hidden_size,
            heads_k=self.linear_num_key_heads,
            heads_v=self.linear_num_value_heads,
            k_dim=self.linear_key_head_dim,
            v_dim=self.linear_value_head_dim,
            conv_kernel_size=self.linear_conv_kernel_dim,
            rms_norm_eps=self.rms_norm_eps,
            layout=ProjectionLayout(self.projection_layout),
        )

    def attention_options(self) -> GatedAttentionOptions:
        return GatedAttentionOptions(
            hidden_size=self.hidden_size,
            num_q_heads=self.num_attention_heads,
            num_kv_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            rotary_dim=self.rotary_dim,
            rope_theta=self.rope_theta,
            rms_norm_eps=self.rms_norm_eps,
            bias=self.qkv_bias,
        )


def hybrid_layer_types(config: dict[str, Any]) -> tuple[str, ...]:
    """`layer_types`, or transformers' pattern from `full_attention_interval`."""
    layers = int(config["num_hidden_layers"])
    kinds = config.get("layer_types")
    if kinds is None:
        interval = int(config.get("full_attention_interval", DEFAULT_FULL_ATTENTION_INTERVAL))
        kinds = [LINEAR_ATTENTION if (i + 1) % interval else FULL_ATTENTION for i in range(layers)]
    unknown = sorted(set(kinds) - {LINEAR_ATTENTION, FULL_ATTENTION})
    if unknown or len(kinds) != layers:
        raise ModelConfigError(
            f"layer_types {list(kinds)!r}: need {layers} of {LINEAR_ATTENTION!r} / "
            f"{FULL_ATTENTION!r}"
        )
    return tuple(kinds)


def _sparse_layers(config: dict[str, Any], architecture: str, layers: int) -> tuple[int, ...]:
    """Layers with the routed block (transformers' rule per architecture)."""
    if architecture == QWEN3_5:
        return ()
    if architecture == QWEN3_5_MOE:
        return tuple(range(layers))
    if not int(config.get("num_experts") or 0):
        return ()
    step = int(config.get("decoder_sparse_step", 1) or 1)
    dense = set(config.get("mlp_only_layers") or [])
    return tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)


def _rope(config: dict[str, Any]) -> tuple[float, float]:
    """(rope_theta, partial_rotary_factor); text positions only, so Qwen3.5's multimodal
    sections rotate as plain RoPE (one position on every axis; the image prefill's
    sections: qwen3_5_vl.py)."""
    rope = config.get("rope_parameters") or config
    rope_type = rope.get("rope_type") or rope.get("type") or "default"
    if rope_type != "default":
        raise ModelConfigError(f"hybrid attention with rope_type {rope_type!r}: only 'default'")
    factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    return float(rope["rope_theta"]), float(factor or DEFAULT_PARTIAL_ROTARY_FACTOR)


def parse_hybrid_config(config: dict[str, Any], max_model_len: int | None = None) -> HybridConfig:
    """Validate the HF config of a hybrid checkpoint (a causal LM, or a multimodal one whose
    decoder is read) and normalise it; `max_model_len` does not change it (default RoPE)."""
    del max_model_len
    checkpoint_architecture = config["architectures"][0]
    architecture = decoder_architecture(checkpoint_architecture)
    if architecture not in PROJECTION_LAYOUTS:
        raise ModelConfigError(
            f"{checkpoint_architecture} is not a Gated DeltaNet hybrid architecture"
        )
    config = decoder_config(config)
    if config.get("hidden_act", "silu") != "silu":
        raise ModelConfigError(
            f"{architecture} with hidden_act {config['hidden_act']!r}: only silu"
        )
    layers = int(config["num_hidden_layers"])
    sparse = _sparse_layers(config, architecture, layers)
    rope_theta, rotary_factor = _rope(config)
    top_k = int(config.get("num_experts_per_tok") or 0)
    experts = int(config.get("num_experts") or 0)
    if sparse and not 1 <= top_k <= experts:
        raise ModelConfigError(
            f"{architecture} needs 1 <= num_experts_per_tok <= num_experts; got {top_k} of "
            f"{experts}"
        )
    return HybridConfig(
        architecture=checkpoint_architecture,
        vocab_size=int(config["vocab_size"]),
        hidden_size=int(config["hidden_size"]),
        intermediate_size=int(config.get("intermediate_size") or 0),
        num_hidden_layers=layers,
        num_attention_heads=int(config["num_attention_heads"]),
        num_key_value_heads=int(config["num_key_value_heads"]),
        head_dim=int(config["head_dim"]),
        rms_norm_eps=float(config["rms_norm_eps"]),
        rope_theta=rope_theta,
        partial_rotary_factor=rotary_factor,
        max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(config.get("attention_bias", False)),
        o_proj_bias=bool(config.get("attention_bias", False)),
        qk_norm=True,
        layer_types=hybrid_layer_types(config),
        num_experts=experts if sparse else 0,
        num_experts_per_tok=top_k if sparse else 0,
        moe_intermediate_size=int(config.get("moe_intermediate_size") or 0) if sparse else 0,
        norm_topk_prob=architecture == QWEN3_5_MOE or bool(config.get("norm_topk_prob", True)),
        shared_expert_intermediate_size=(
            int(config.get("shared_expert_intermediate_size") or 0) if sparse else 0
        ),
        sparse_layers=sparse,
        linear_num_key_heads=int(config["linear_num_key_heads"]),
        linear_num_value_heads=int(config["linear_num_value_heads"]),
        linear_key_head_dim=int(config["linear_key_head_dim"]),
        linear_value_head_dim=int(config["linear_value_head_dim"]),
        linear_conv_kernel_dim=int(config["linear_conv_kernel_dim"]),
        projection_layout=PROJECTION_LAYOUTS[architecture].value,
    )
