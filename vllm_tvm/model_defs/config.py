"""One validated description of a llama-family model, read from an HF `config.json`.

Why: HF configs of the supported families spell the same facts differently (transformers
4 writes `rope_theta` + `rope_scaling`, transformers 5 writes `rope_parameters`; Qwen2 has
q/k/v bias without saying so; Qwen3 has per-head q/k RMSNorm; OLMo-2 norms sublayer outputs
and whole q/k projections; Granite scales embeddings, residuals, attention and logits; Phi-3
rotates part of each head). RoPE settings are read by rope_scaling.py. Everything downstream (the nn
model, the compiler, the runtime) reads this dataclass instead, and anything the model
definition cannot reproduce exactly is refused here, by name, before a compile starts.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from vllm_tvm.model_defs.rope_scaling import partial_rotary_factor, rope_settings


class ModelConfigError(ValueError):
    """A checkpoint config the model definition cannot run exactly."""


class ConfigRecord:
    """JSON form and fingerprint of a frozen config dataclass (every family's config)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (stored in the artifact's metadata)."""
        return asdict(self)  # type: ignore[call-overload]

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON form: part of the artifact's cache key."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class LlamaFamilyConfig(ConfigRecord):
    """Shape and numerics of a Llama, Mistral, Qwen2/3, Phi-3, OLMo-2 or Granite decoder."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_type: str = "default"
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_proj_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    partial_rotary_factor: float = 1.0
    norm_position: str = "pre"
    """`pre`: RMSNorm before each sublayer (Llama); `post`: on each sublayer's output (OLMo-2)."""
    qk_norm_scope: str = "head"
    """q/k RMSNorm per head (Qwen3) or over the whole q / k projection (OLMo-2)."""
    embedding_multiplier: float = 1.0
    """Granite: embeddings are multiplied by this."""
    residual_multiplier: float = 1.0
    """Granite: each sublayer's output is multiplied by this before the residual add."""
    attention_multiplier: float | None = None
    """Granite: the softmax scale (None: 1 / sqrt(head_dim))."""
    logits_scaling: float = 1.0
    """Granite: logits are divided by this."""

    @property
    def rotary_dim(self) -> int:
        """Channels of each head that RoPE rotates (the first ones)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def attention_scale(self) -> float:
        """The softmax scale of q . k."""
        if self.attention_multiplier is not None:
            return self.attention_multiplier
        return self.head_dim**-0.5


def require_key(config: dict[str, Any], key: str) -> Any:
    """config[key], or an error naming the architecture and the missing key."""
    if key not in config or config[key] is None:
        raise ModelConfigError(
            f"config.json of {config.get('architectures', ['?'])[0]} is missing required key "
            f"'{key}'"
        )
    return config[key]


def _refuse_unsupported_features(config: dict[str, Any]) -> None:
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise ModelConfigError(f"unsupported hidden_act '{act}'; supported: silu")
    if config.get("pretraining_tp", 1) not in (1, None):
        raise ModelConfigError(
            f"unsupported pretraining_tp {config['pretraining_tp']}; supported: 1"
        )


def _granite_multipliers(config: dict[str, Any]) -> dict[str, Any]:
    """Granite's four scalars (absent keys keep Llama's numerics)."""
    if config["architectures"][0] != "GraniteForCausalLM":
        return {}
    return {
        "embedding_multiplier": float(config.get("embedding_multiplier", 1.0)),
        "residual_multiplier": float(config.get("residual_multiplier", 1.0)),
        "attention_multiplier": float(config.get("attention_multiplier", 1.0)),
        "logits_scaling": float(config.get("logits_scaling", 1.0)),
    }


def parse_llama_family_config(config: dict[str, Any]) -> LlamaFamilyConfig:
    """Validate an HF config dict of a llama-family architecture and normalise it."""
    architecture = require_key(config, "architectures")[0]
    _refuse_unsupported_features(config)
    hidden = int(require_key(config, "hidden_size"))
    heads = int(require_key(config, "num_attention_heads"))
    head_dim = int(config.get("head_dim") or hidden // heads)
    rotary_factor = partial_rotary_factor(config)
    theta, rope_type, rope_scaling, context = rope_settings(config, int(head_dim * rotary_factor))
    is_qwen2 = architecture == "Qwen2ForCausalLM"
    is_qwen3 = architecture == "Qwen3ForCausalLM"
    is_olmo2 = architecture == "Olmo2ForCausalLM"
    attention_bias = bool(config.get("attention_bias", False))
    sliding = config.get("sliding_window")
    if architecture.startswith("Qwen") and not config.get("use_sliding_window", False):
        sliding = None
    return LlamaFamilyConfig(
        architecture=architecture,
        vocab_size=int(require_key(config, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(require_key(config, "intermediate_size")),
        num_hidden_layers=int(require_key(config, "num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_type=rope_type,
        rope_scaling=rope_scaling,
        max_position_embeddings=context,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=True if is_qwen2 else attention_bias,
        o_proj_bias=False if is_qwen2 else attention_bias,
        mlp_bias=bool(config.get("mlp_bias", False)),
        qk_norm=is_qwen3 or is_olmo2,
        sliding_window=int(sliding) if sliding else None,
        partial_rotary_factor=rotary_factor,
        norm_position="post" if is_olmo2 else "pre",
        qk_norm_scope="projection" if is_olmo2 else "head",
        **_granite_multipliers(config),
    )
