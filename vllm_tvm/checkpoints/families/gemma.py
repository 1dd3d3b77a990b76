"""Gemma 1/2/3: the Llama definition with Gemma's numerics switches, read from HF configs
and from llama.cpp's `gemma` / `gemma2` / `gemma3` files.

Gemma differs from Llama only in numerics switches ((1 + w) RMSNorm, sqrt(hidden)-scaled
embeddings, GELU-tanh, sandwich norms, soft-capping, `query_pre_attn_scalar`, per-layer
sliding windows, a separate RoPE base for the sliding layers). Gemma 2's attention-logit
soft-capping is compiled into the paged-attention kernels (compiler/attention_softcap.py).
Gemma 3 configs carry the key but transformers does not apply it there, so neither does
the model.

The one model definition (model_defs/llama.py) implements the switches; this module is the
only place that knows which Gemma generation sets which, including the spellings of
configs written by transformers 4 (`sliding_window_pattern`, `rope_local_base_freq`) and 5
(`layer_types`, per-layer-type `rope_parameters`), and what llama.cpp's converter writes.
"""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.families.llama import BLOCK_TENSORS, QK_NORM
from vllm_tvm.checkpoints.family_spec import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    FamilySpec,
    GGUFArchitecture,
    GGUFKey,
    ModelConfigError,
)
from vllm_tvm.checkpoints.gguf_file import GGUFFile

GEMMA_TEXT_ARCHITECTURES = ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
GEMMA3_MULTIMODAL = "Gemma3ForConditionalGeneration"
"""Served with its vision tower (model_defs/gemma3_multimodal.py): the decoder's options are
read from `text_config` here, the vision tower's from `vision_config` there."""

GEMMA3_DEFAULT_SLIDING_PATTERN = 6
GEMMA3_DEFAULT_LOCAL_ROPE_THETA = 10000.0
"""transformers' defaults where a Gemma 3 config (or a GGUF file) does not say."""


def _text_tower_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config: a multimodal Gemma 3 checkpoint nests it in `text_config`."""
    architecture = config["architectures"][0]
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ModelConfigError(f"config.json of {architecture} has no 'text_config'")
    return {**text, "architectures": [architecture]}


def _default_layer_types(architecture: str, config: dict[str, Any], layers: int) -> list[str]:
    if architecture == "Gemma2ForCausalLM":
        return [SLIDING_ATTENTION if i % 2 == 0 else FULL_ATTENTION for i in range(layers)]
    pattern = int(
        config.get("sliding_window_pattern")
        or config.get("_sliding_window_pattern")
        or GEMMA3_DEFAULT_SLIDING_PATTERN
    )
    return [FULL_ATTENTION if (i + 1) % pattern == 0 else SLIDING_ATTENTION for i in range(layers)]


def _split_rope_parameters(config: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
    """(the config with the full-attention layers' RoPE only, the sliding layers' base).

    transformers 5 writes Gemma 3's RoPE per layer type; transformers 4 wrote the global one
    as usual and the local base as `rope_local_base_freq`. The sliding layers' RoPE must be
    plain (no scaling): anything else is refused by name.
    """
    params = config.get("rope_parameters")
    if isinstance(params, dict) and SLIDING_ATTENTION in params:
        local = dict(params[SLIDING_ATTENTION] or {})
        local_type = local.get("rope_type", "default")
        if local_type != "default":
            raise ModelConfigError(
                f"unsupported RoPE type '{local_type}' on sliding layers; supported: default"
            )
        rest = {k: v for k, v in config.items() if k != "rope_parameters"}
        return {**rest, "rope_parameters": params.get(FULL_ATTENTION) or {}}, float(
            local["rope_theta"]
        )
    local_base = config.get("rope_local_base_freq")
    if local_base is None and config["architectures"][0] != "Gemma2ForCausalLM":
        local_base = GEMMA3_DEFAULT_LOCAL_ROPE_THETA
    return config, float(local_base) if local_base is not None else None


def _options(
    config: dict[str, Any], rope_theta: float, local_theta: float | None
) -> dict[str, Any]:
    """`LlamaFamilyConfig` fields of a Gemma checkpoint (the text config)."""
    architecture = config["architectures"][0]
    if config.get("use_bidirectional_attention"):
        raise ModelConfigError(
            "unsupported use_bidirectional_attention=true; supported: causal attention"
        )
    hidden = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    options: dict[str, Any] = {
        "hidden_act": _activation(config),
        "norm_weight_offset": 1.0,
        "embedding_scale": hidden**0.5,
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
    }
    if architecture == "GemmaForCausalLM":
        return options
    window = config.get("sliding_window")
    layer_types = list(config.get("layer_types") or []) or (
        _default_layer_types(architecture, config, layers) if window else []
    )
    sliding = window is not None and SLIDING_ATTENTION in layer_types
    has_local_base = local_theta is not None and local_theta != rope_theta
    options.update(
        sandwich_norms=True,
        query_pre_attn_scalar=float(config.get("query_pre_attn_scalar", 256)),
        final_logit_softcapping=_optional_float(config.get("final_logit_softcapping")),
        attn_logit_softcapping=(
            _optional_float(config.get("attn_logit_softcapping"))
            if architecture == "Gemma2ForCausalLM"
            else None
        ),
        qk_norm=architecture != "Gemma2ForCausalLM",
        sliding_window=int(window) if sliding else None,
        layer_types=tuple(layer_types),
        rope_local_theta=local_theta if sliding and has_local_base else None,
    )
    return options


def _activation(config: dict[str, Any]) -> str:
    """Gemma's MLP activation; the legacy `gelu` of the first releases means the tanh
    approximation (as transformers reads it)."""
    act = config.get("hidden_activation") or config.get("hidden_act") or "gelu_pytorch_tanh"
    return "gelu_pytorch_tanh" if act == "gelu" else act


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _gguf_keys(reader: GGUFFile, key: GGUFKey, config: dict[str, Any]) -> dict[str, Any]:
    """The Gemma keys llama.cpp writes; what it leaves out (the sliding-layer RoPE base, the
    layer pattern, `query_pre_attn_scalar`) keeps transformers' Gemma defaults, as
    transformers' own GGUF loader does."""
    del reader, config
    keys: dict[str, Any] = {"hidden_act": "gelu_pytorch_tanh"}
    for gguf_key, hf_key in (
        ("attention.sliding_window", "sliding_window"),
        ("attn_logit_softcapping", "attn_logit_softcapping"),
        ("final_logit_softcapping", "final_logit_softcapping"),
    ):
        value = key(gguf_key, None)
        if value is not None:
            keys[hf_key] = value
    return keys


_SANDWICH_NORMS = {
    **BLOCK_TENSORS,
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
"""Gemma 2/3 norm the attention and MLP outputs too; `ffn_norm` is then the MLP's input norm."""


def _gguf(name: str, hf_architecture: str, block_tensors: dict[str, str]) -> GGUFArchitecture:
    """llama.cpp's converter stores Gemma's RMSNorm weights as HF's w + 1 (the factor the
    norm multiplies by); the HF names carry w (gguf_weights.py subtracts 1)."""
    return GGUFArchitecture(
        name, hf_architecture, block_tensors, norm_weight_offset=1.0, config_keys=_gguf_keys
    )


FAMILIES = (
    FamilySpec(
        name="gemma",
        architectures=GEMMA_TEXT_ARCHITECTURES,
        tensor_parallel=True,
        gguf=(
            _gguf("gemma", "GemmaForCausalLM", BLOCK_TENSORS),
            _gguf("gemma2", "Gemma2ForCausalLM", _SANDWICH_NORMS),
            _gguf("gemma3", "Gemma3ForCausalLM", {**_SANDWICH_NORMS, **QK_NORM}),
        ),
        config_options=_options,
        sliding_rope=_split_rope_parameters,
    ),
    FamilySpec(
        name="gemma3-multimodal",
        architectures=(GEMMA3_MULTIMODAL,),
        definition="gemma3-multimodal",
        config_options=_options,
        text_config=_text_tower_config,
        sliding_rope=_split_rope_parameters,
    ),
)
