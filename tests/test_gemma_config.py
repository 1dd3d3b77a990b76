"""Gemma configs become the right named options of the one Llama-family definition.

The oracle for per-layer attention kinds is transformers' own config classes: a config
written without `layer_types` (as transformers 4 wrote them) must give the kinds that
transformers derives for it. No compile here.
"""

from __future__ import annotations

import pytest
import transformers

from vllm_tvm.artifacts.backends import ATTENTION_FLASHINFER, ATTENTION_TIR
from vllm_tvm.checkpoints.gguf_tensor_names import hf_tensor_name
from vllm_tvm.compiler.attention import check_attention_softcap
from vllm_tvm.model_defs.config import ModelConfigError, parse_llama_family_config

SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 7,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 512,
}


def _hf_dict(config_class: str, architecture: str, **overrides) -> dict:
    config = getattr(transformers, config_class)(**SHAPE, **overrides)
    return {**config.to_dict(), "architectures": [architecture]}


def _without(config: dict, *keys: str) -> dict:
    return {k: v for k, v in config.items() if k not in keys}


@pytest.mark.parametrize(
    ("config_class", "architecture", "overrides"),
    [
        ("Gemma2Config", "Gemma2ForCausalLM", {"attn_logit_softcapping": None}),
        ("Gemma3TextConfig", "Gemma3ForCausalLM", {}),
    ],
)
def test_layer_kinds_without_layer_types_follow_transformers(
    config_class: str, architecture: str, overrides: dict
) -> None:
    hf = _hf_dict(config_class, architecture, sliding_window=32, **overrides)
    parsed = parse_llama_family_config(_without(hf, "layer_types"))
    assert list(parsed.layer_types) == hf["layer_types"]
    assert parsed.sliding_window == 32


def test_gemma3_transformers4_spelling_equals_transformers5_spelling() -> None:
    modern = _hf_dict("Gemma3TextConfig", "Gemma3ForCausalLM", sliding_window=32)
    legacy = {
        **_without(modern, "layer_types", "rope_parameters"),
        "sliding_window_pattern": 6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
    }
    assert parse_llama_family_config(legacy) == parse_llama_family_config(modern)
    parsed = parse_llama_family_config(modern)
    assert (parsed.rope_theta, parsed.rope_local_theta) == (1000000.0, 10000.0)


def test_gemma_numerics_options() -> None:
    gemma = parse_llama_family_config(_hf_dict("GemmaConfig", "GemmaForCausalLM"))
    assert (gemma.norm_weight_offset, gemma.embedding_scale) == (1.0, 8.0)
    assert gemma.hidden_act == "gelu_pytorch_tanh"
    assert not gemma.sandwich_norms and gemma.sliding_window is None
    gemma2 = parse_llama_family_config(
        _hf_dict("Gemma2Config", "Gemma2ForCausalLM", attn_logit_softcapping=None)
    )
    assert gemma2.sandwich_norms and not gemma2.qk_norm
    assert (gemma2.query_pre_attn_scalar, gemma2.final_logit_softcapping) == (256.0, 30.0)
    assert gemma2.rope_local_theta is None


def test_legacy_gelu_of_gemma_means_the_tanh_approximation() -> None:
    config = {**_hf_dict("GemmaConfig", "GemmaForCausalLM"), "hidden_act": "gelu"}
    assert parse_llama_family_config(config).hidden_act == "gelu_pytorch_tanh"


def test_attention_softcapping_is_read_for_gemma2_only() -> None:
    gemma2 = parse_llama_family_config(_hf_dict("Gemma2Config", "Gemma2ForCausalLM"))
    assert gemma2.attn_logit_softcapping == 50.0
    gemma3 = _hf_dict("Gemma3TextConfig", "Gemma3ForCausalLM", attn_logit_softcapping=50.0)
    assert parse_llama_family_config(gemma3).attn_logit_softcapping is None


def test_flashinfer_with_attention_softcapping_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"'flashinfer' does not support attn_logit_softcapping"):
        check_attention_softcap(ATTENTION_FLASHINFER, 50.0)
    check_attention_softcap(ATTENTION_TIR, 50.0)
    check_attention_softcap(ATTENTION_FLASHINFER, None)


def test_bidirectional_gemma3_is_refused_by_name() -> None:
    config = _hf_dict("Gemma3TextConfig", "Gemma3ForCausalLM", use_bidirectional_attention=True)
    with pytest.raises(ModelConfigError, match="use_bidirectional_attention"):
        parse_llama_family_config(config)


def test_unknown_layer_type_is_refused_by_name() -> None:
    config = _hf_dict("Gemma3TextConfig", "Gemma3ForCausalLM", sliding_window=32)
    config["layer_types"] = ["chunked_attention"] * SHAPE["num_hidden_layers"]
    with pytest.raises(ModelConfigError, match="chunked_attention"):
        parse_llama_family_config(config)


def test_mistral_window_slides_every_layer_and_qwen2_follows_its_layer_types() -> None:
    mistral = parse_llama_family_config(
        _hf_dict("MistralConfig", "MistralForCausalLM", sliding_window=16)
    )
    assert mistral.sliding_layers == [True] * SHAPE["num_hidden_layers"]
    qwen2 = _hf_dict(
        "Qwen2Config",
        "Qwen2ForCausalLM",
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=3,
    )
    parsed = parse_llama_family_config(qwen2)
    assert list(parsed.layer_types) == qwen2["layer_types"]
    assert parsed.sliding_layers.count(True) == SHAPE["num_hidden_layers"] - 3


@pytest.mark.parametrize(
    ("arch", "gguf_name", "hf_name"),
    [
        ("gemma", "blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"),
        ("gemma2", "blk.1.ffn_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight"),
        (
            "gemma2",
            "blk.1.post_attention_norm.weight",
            "model.layers.1.post_attention_layernorm.weight",
        ),
        (
            "gemma3",
            "blk.2.post_ffw_norm.weight",
            "model.layers.2.post_feedforward_layernorm.weight",
        ),
        ("gemma3", "blk.2.attn_k_norm.weight", "model.layers.2.self_attn.k_norm.weight"),
    ],
)
def test_gguf_gemma_tensor_names(arch: str, gguf_name: str, hf_name: str) -> None:
    assert hf_tensor_name(gguf_name, arch) == hf_name
