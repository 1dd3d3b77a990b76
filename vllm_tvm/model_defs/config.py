"""One validated description of a llama-family model, read from an HF `config.json`.

Why: HF configs of the supported families spell the same facts differently (transformers
4 writes `rope_theta` + `rope_scaling`, transformers 5 writes `rope_parameters`; Gemma,
Granite, OLMo-2 and Qwen switch numerics on by architecture). This module reads what every
llama-shaped config says (RoPE settings through rope_scaling.py); what a family's
architecture implies beyond that is its family module's (checkpoints/families/), found by
architecture name, so no family is named here. Everything downstream (the nn model, the
compiler, the runtime) reads this dataclass instead, and anything the model definition
cannot reproduce exactly is refused here, by name, before a compile starts.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vllm_tvm.checkpoints.family_index import family_of

# Defined with the family records, which raise and read them too; the model definitions
# import them from here.
from vllm_tvm.checkpoints.family_spec import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    FamilySpec,
    ModelConfigError,
)
from vllm_tvm.model_defs.rope_scaling import (
    LAYER_ROPE_TYPES,
    partial_rotary_factor,
    rope_settings,
)


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
    """Shape and numerics of a Llama, Mistral, Qwen2/3, Phi-3, OLMo-2, Granite or Gemma 1/2/3
    decoder."""

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
    residual_multiplier: float = 1.0
    """Granite: each sublayer's output is multiplied by this before the residual add."""
    attention_multiplier: float | None = None
    """Granite: the softmax scale (None: 1 / sqrt(head_dim))."""
    logits_scaling: float = 1.0
    """Granite: logits are divided by this."""
    # Gemma's options (defaults: Llama's numerics); see checkpoints/families/gemma.py.
    hidden_act: str = "silu"
    norm_weight_offset: float = 0.0
    """Every RMSNorm multiplies by `offset + w` (Gemma stores w - 1: offset 1.0)."""
    embedding_scale: float = 1.0
    """Token embeddings are multiplied by this (Gemma: sqrt(hidden_size); Granite's
    embedding_multiplier)."""
    sandwich_norms: bool = False
    """Norms after attention and MLP too (Gemma 2/3's post-attention / pre- and
    post-feedforward norms)."""
    query_pre_attn_scalar: float | None = None
    """Gemma: attention logits are scaled by this ** -0.5 instead of head_dim ** -0.5."""
    final_logit_softcapping: float | None = None
    """Logits become cap * tanh(logits / cap)."""
    attn_logit_softcapping: float | None = None
    """Gemma 2: attention scores (q.k times the softmax scale) become cap * tanh(score /
    cap) before the softmax (compiler/attention_softcap.py)."""
    layer_types: tuple[str, ...] = ()
    """Per layer `full_attention` or `sliding_attention` (`sliding_window` tokens); empty:
    every layer attends to the whole context."""
    rope_local_theta: float | None = None
    """RoPE base of the sliding layers when it differs from `rope_theta` (Gemma 3)."""
    tensor_parallel_shards: int = 1
    """Ranks the network is split over (model_defs/tensor_parallel.py); 1: unsplit."""
    aux_hidden_layers: tuple[int, ...] = ()
    """The layers whose inputs a target built for an EAGLE-3 head returns from its
    hidden-states prefill (artifacts/speculative_roles.py); empty: the final-norm hidden
    states (or no such function)."""

    @property
    def sliding_layers(self) -> list[bool]:
        """Whether each layer attends to the last `sliding_window` tokens only."""
        if not self.layer_types or self.sliding_window is None:
            return [False] * self.num_hidden_layers
        return [kind == SLIDING_ATTENTION for kind in self.layer_types]

    @property
    def kv_cache_layer_kinds(self) -> list[str]:
        """TVM attention kind of each KV-cache layer: the model's layers, plus one unused
        full-attention layer when every layer slides (TVM 0.27 allocates its q/k/v staging
        buffers only when some layer is full attention)."""
        kinds = ["mha_sliding" if slides else "mha" for slides in self.sliding_layers]
        return kinds if "mha" in kinds else [*kinds, "mha"]

    @property
    def rotary_dim(self) -> int:
        """Channels of each head that RoPE rotates (the first ones)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def attention_scale(self) -> float:
        """The softmax scale of q . k."""
        if self.attention_multiplier is not None:
            return self.attention_multiplier
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (stored in the artifact's metadata), with the KV cache's layer
        count for the runtime's memory sizing."""
        record = {**super().to_dict(), "kv_cache_layers": len(self.kv_cache_layer_kinds)}
        if self.tensor_parallel_shards == 1:
            del record["tensor_parallel_shards"]  # unsplit models keep their fingerprints
        if not self.aux_hidden_layers:
            del record["aux_hidden_layers"]  # so do all but EAGLE-3 targets
        return record


def require_key(config: dict[str, Any], key: str) -> Any:
    """config[key], or an error naming the architecture and the missing key."""
    if key not in config or config[key] is None:
        raise ModelConfigError(
            f"config.json of {config.get('architectures', ['?'])[0]} is missing required key "
            f"'{key}'"
        )
    return config[key]


SUPPORTED_ACTIVATIONS = ("silu", "gelu_pytorch_tanh", "gelu")
"""HF `hidden_act` names of the gated MLP's activation (`gelu` is the exact, erf form)."""


def _refuse_unsupported_features(config: dict[str, Any]) -> None:
    act = config.get("hidden_activation") or config.get("hidden_act", "silu")
    if act not in SUPPORTED_ACTIVATIONS:
        raise ModelConfigError(
            f"unsupported hidden_act '{act}'; supported: " + ", ".join(SUPPORTED_ACTIVATIONS)
        )
    if config.get("pretraining_tp", 1) not in (1, None):
        raise ModelConfigError(
            f"unsupported pretraining_tp {config['pretraining_tp']}; supported: 1"
        )


def _sliding_layer_types(
    config: dict[str, Any], window: int | None, layers: int
) -> tuple[str, ...]:
    """Per-layer attention kinds of a windowed Mistral/Qwen2 (HF's `layer_types`, else every
    layer slides); empty when no layer does."""
    if not window:
        return ()
    kinds = tuple(config.get("layer_types") or (SLIDING_ATTENTION,) * layers)
    return kinds if SLIDING_ATTENTION in kinds else ()


def _check_layer_types(parsed: LlamaFamilyConfig) -> LlamaFamilyConfig:
    kinds = parsed.layer_types
    if not kinds:
        return parsed
    unknown = sorted(set(kinds) - {FULL_ATTENTION, SLIDING_ATTENTION})
    if unknown or len(kinds) != parsed.num_hidden_layers:
        raise ModelConfigError(
            f"unsupported layer_types {list(kinds)}; supported: one of {FULL_ATTENTION}, "
            f"{SLIDING_ATTENTION} per layer ({parsed.num_hidden_layers} layers)"
        )
    return parsed


def _sliding_window(config: dict[str, Any], family: FamilySpec) -> Any:
    """The config's `sliding_window`, unless the family's switch for it is off."""
    switch = family.sliding_window_switch
    if switch is not None and not config.get(switch, False):
        return None
    return config.get("sliding_window")


_LLAMA_NUMERICS = FamilySpec(name="llama-numerics", architectures=())
"""What an architecture no family owns is parsed as (callers refuse unknown names first:
model_defs/architectures.py); the speculative heads' configs are read this way."""


def parse_llama_family_config(
    config: dict[str, Any], max_model_len: int | None = None
) -> LlamaFamilyConfig:
    """Validate an HF config dict of a llama-family architecture and normalise it, for an
    engine of `max_model_len` tokens (None: the checkpoint's context; longrope's factor set
    depends on it, rope_scaling.py)."""
    architecture = require_key(config, "architectures")[0]
    family = family_of(architecture) or _LLAMA_NUMERICS
    if family.text_config is not None:
        config = family.text_config(config)
    _refuse_unsupported_features(config)
    local_theta = None
    if family.sliding_rope is not None:
        config, local_theta = family.sliding_rope(config)
    hidden = int(require_key(config, "hidden_size"))
    heads = int(require_key(config, "num_attention_heads"))
    layers = int(require_key(config, "num_hidden_layers"))
    head_dim = int(config.get("head_dim") or hidden // heads)
    rotary_factor = partial_rotary_factor(config)
    theta, rope_type, rope_scaling, context = rope_settings(
        config, int(head_dim * rotary_factor), max_model_len
    )
    attention_bias = bool(config.get("attention_bias", False))
    sliding = _sliding_window(config, family)
    layer_types = _sliding_layer_types(config, sliding, layers)
    parsed = LlamaFamilyConfig(
        architecture=architecture,
        vocab_size=int(require_key(config, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(require_key(config, "intermediate_size")),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_type=rope_type,
        rope_scaling=rope_scaling,
        max_position_embeddings=context,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=attention_bias,
        o_proj_bias=attention_bias,
        mlp_bias=bool(config.get("mlp_bias", False)),
        sliding_window=int(sliding) if layer_types else None,
        layer_types=layer_types,
        hidden_act=config.get("hidden_act", "silu"),
        partial_rotary_factor=rotary_factor,
    )
    if family.config_options is not None:
        parsed = replace(parsed, **family.config_options(config, theta, local_theta))
    if parsed.rope_local_theta is not None and rope_type == "llama3":
        raise ModelConfigError(
            "unsupported rope_scaling type 'llama3' with a sliding-layer RoPE base; supported "
            "there: " + ", ".join(LAYER_ROPE_TYPES)
        )
    return _check_layer_types(parsed)
