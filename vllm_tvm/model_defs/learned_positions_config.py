"""One validated description of a GPT-2 or OPT decoder, read from an HF `config.json`.

Why: these families are not llama-shaped (learned absolute positions instead of RoPE,
LayerNorm with bias, GELU / ReLU MLPs, biases everywhere, GPT-2's `Conv1D` weights stored
[in, out]) and spell their sizes differently (`n_embd` / `n_layer` ... vs `hidden_size`
...). This dataclass carries the few facts learned_positions.py needs; every variant it
cannot run exactly (OPT-350m's projected embeddings and post-LayerNorm, cross-attention,
GPT-2's per-layer attention scaling) is refused here by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_tvm.model_defs.config import ConfigRecord, ModelConfigError, require_key

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
"""HF `activation_function` values: erf GELU, tanh-approximated GELU (two names), ReLU."""
OPT_POSITION_OFFSET = 2
"""OPT's position table starts with two unused rows (position p reads row p + 2)."""


@dataclass(frozen=True)
class LearnedPositionConfig(ConfigRecord):
    """Shape and numerics of a GPT-2 / OPT decoder (names as LlamaFamilyConfig's)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    layer_norm_eps: float
    hidden_act: str
    bias: bool
    position_offset: int
    tie_word_embeddings: bool
    conv1d_weights: bool
    """GPT-2 stores projection weights [in, out] (HF `Conv1D`), OPT [out, in]."""


def _refuse(config: dict[str, Any], key: str, supported: Any) -> None:
    value = config.get(key, supported)
    if value != supported:
        raise ModelConfigError(
            f"unsupported {key} {value!r} for {config['architectures'][0]}; "
            f"supported: {supported!r}"
        )


def _activation(config: dict[str, Any]) -> str:
    act = require_key(config, "activation_function")
    if act not in ACTIVATIONS:
        raise ModelConfigError(
            f"unsupported activation_function '{act}'; supported: " + ", ".join(ACTIVATIONS)
        )
    return act


def _parse_gpt2(config: dict[str, Any]) -> LearnedPositionConfig:
    for key, supported in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        _refuse(config, key, supported)
    hidden = int(require_key(config, "n_embd"))
    heads = int(require_key(config, "n_head"))
    return LearnedPositionConfig(
        architecture="GPT2LMHeadModel",
        vocab_size=int(require_key(config, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(config.get("n_inner") or 4 * hidden),
        num_hidden_layers=int(require_key(config, "n_layer")),
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        max_position_embeddings=int(require_key(config, "n_positions")),
        layer_norm_eps=float(config.get("layer_norm_epsilon", 1e-5)),
        hidden_act=_activation(config),
        bias=True,
        position_offset=0,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
        conv1d_weights=True,
    )


def _parse_opt(config: dict[str, Any]) -> LearnedPositionConfig:
    hidden = int(require_key(config, "hidden_size"))
    heads = int(require_key(config, "num_attention_heads"))
    for key, supported in (
        ("do_layer_norm_before", True),
        ("_remove_final_layer_norm", False),
        ("layer_norm_elementwise_affine", True),
        ("word_embed_proj_dim", hidden),
    ):
        _refuse(config, key, supported)
    return LearnedPositionConfig(
        architecture="OPTForCausalLM",
        vocab_size=int(require_key(config, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(require_key(config, "ffn_dim")),
        num_hidden_layers=int(require_key(config, "num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        max_position_embeddings=int(require_key(config, "max_position_embeddings")),
        layer_norm_eps=1e-5,
        hidden_act=_activation(config),
        bias=bool(config.get("enable_bias", True)),
        position_offset=OPT_POSITION_OFFSET,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
        conv1d_weights=False,
    )


def parse_learned_position_config(config: dict[str, Any]) -> LearnedPositionConfig:
    """Validate an HF config dict of GPT2LMHeadModel or OPTForCausalLM and normalise it."""
    architecture = require_key(config, "architectures")[0]
    if architecture == "GPT2LMHeadModel":
        return _parse_gpt2(config)
    if architecture == "OPTForCausalLM":
        return _parse_opt(config)
    raise ModelConfigError(f"{architecture} is not a learned-position architecture")
