"""RoPE scalings: our frequencies and factors equal transformers' own rope functions.

The compiled models are checked end to end by tests/test_generate_matches_transformers.py
(one tiny model per scaling); these cheap checks cover the parameter variants (truncate,
mscale, explicit attention factors, both config spellings) that no tiny model compiles.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from vllm_tvm.model_defs.config import parse_llama_family_config
from vllm_tvm.model_defs.rope_scaling import RopeConfigError, model_applied_rope

SHAPE = {
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "vocab_size": 32,
    "max_position_embeddings": 4096,
}

FLOAT32_ROUNDING = 1e-6
"""transformers divides in float32, we in float64 then round: a few ulps apart."""

YARN_VARIANTS = [
    {"factor": 4.0, "original_max_position_embeddings": 1024},
    {"factor": 8.0, "original_max_position_embeddings": 512, "truncate": False},
    {"factor": 4.0, "original_max_position_embeddings": 1024, "beta_fast": 16, "beta_slow": 2},
    {"factor": 40.0, "original_max_position_embeddings": 100, "mscale": 1.0, "mscale_all_dim": 0.5},
    {"factor": 2.0, "original_max_position_embeddings": 2048, "attention_factor": 1.5},
]


def _ours(hf_config) -> tuple[np.ndarray, float]:
    parsed = parse_llama_family_config({**hf_config.to_dict(), "architectures": ["X"]})
    rope = model_applied_rope(
        parsed.rope_type, parsed.rope_scaling, parsed.rope_theta, parsed.rotary_dim
    )
    assert rope is not None
    return rope


@pytest.mark.parametrize("variant", YARN_VARIANTS)
def test_yarn_frequencies_and_factor_equal_transformers(variant) -> None:
    hf = transformers.LlamaConfig(**SHAPE, rope_scaling={"rope_type": "yarn", **variant})
    inv_freq, factor = ROPE_INIT_FUNCTIONS["yarn"](hf, "cpu")
    ours, our_factor = _ours(hf)
    np.testing.assert_allclose(ours, inv_freq.numpy(), rtol=FLOAT32_ROUNDING)
    assert our_factor == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize("partial", [1.0, 0.75])
def test_longrope_short_frequencies_and_factor_equal_transformers(partial: float) -> None:
    rotary_half = int(SHAPE["hidden_size"] // SHAPE["num_attention_heads"] * partial) // 2
    scaling = {
        "rope_type": "longrope",
        "short_factor": [1.0 + 0.05 * i for i in range(rotary_half)],
        "long_factor": [2.0 + i for i in range(rotary_half)],
    }
    hf = transformers.Phi3Config(
        **SHAPE,
        original_max_position_embeddings=1024,
        partial_rotary_factor=partial,
        rope_scaling=scaling,
        pad_token_id=0,
    )
    inv_freq, factor = ROPE_INIT_FUNCTIONS["longrope"](hf, "cpu", seq_len=1024)
    ours, our_factor = _ours(hf)
    np.testing.assert_allclose(ours, inv_freq.numpy(), rtol=FLOAT32_ROUNDING)
    assert our_factor == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize("partial", [1.0, 0.75])
def test_longrope_long_frequencies_and_factor_equal_transformers_past_the_original(
    partial: float,
) -> None:
    rotary_half = int(SHAPE["hidden_size"] // SHAPE["num_attention_heads"] * partial) // 2
    scaling = {
        "rope_type": "longrope",
        "short_factor": [1.0 + 0.05 * i for i in range(rotary_half)],
        "long_factor": [2.0 + i for i in range(rotary_half)],
    }
    hf = transformers.Phi3Config(
        **SHAPE,
        original_max_position_embeddings=1024,
        partial_rotary_factor=partial,
        rope_scaling=scaling,
        pad_token_id=0,
    )
    inv_freq, factor = ROPE_INIT_FUNCTIONS["longrope"](hf, "cpu", seq_len=1025)
    parsed = parse_llama_family_config({**hf.to_dict(), "architectures": ["X"]}, 1025)
    assert (parsed.rope_scaling["factor_set"], parsed.max_position_embeddings) == ("long", 4096)
    ours, our_factor = model_applied_rope(
        parsed.rope_type, parsed.rope_scaling, parsed.rope_theta, parsed.rotary_dim
    )
    np.testing.assert_allclose(ours, inv_freq.numpy(), rtol=FLOAT32_ROUNDING)
    assert our_factor == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize("max_model_len", [None, 1000, 1024])
def test_longrope_within_the_original_length_keeps_the_short_factors(max_model_len) -> None:
    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32}
    config = {
        **SHAPE,
        "architectures": ["Phi3ForCausalLM"],
        "original_max_position_embeddings": 1024,
        "rope_scaling": scaling,
    }
    parsed = parse_llama_family_config(config, max_model_len)
    assert parsed.rope_scaling["factor_set"] == "short"
    assert parsed.rope_scaling["factors"] == [1.0] * 32
    assert parsed.max_position_embeddings == 1024


def test_longrope_long_mode_without_long_factors_is_refused() -> None:
    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 32}
    config = {**SHAPE, "architectures": ["Phi3ForCausalLM"], "rope_scaling": scaling}
    config["original_max_position_embeddings"] = 1024
    with pytest.raises(RopeConfigError, match="missing key 'long_factor'"):
        parse_llama_family_config(config, 2048)


def test_longrope_transformers_4_spelling_caps_the_context_at_the_original_length() -> None:
    rotary_half = 48
    config = {
        **SHAPE,
        "architectures": ["Phi3ForCausalLM"],
        "hidden_size": 3072,
        "num_attention_heads": 24,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "partial_rotary_factor": 0.75,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "longrope",
            "short_factor": [1.0] * rotary_half,
            "long_factor": [2.0] * rotary_half,
        },
    }
    parsed = parse_llama_family_config(config)
    assert (parsed.rotary_dim, parsed.max_position_embeddings) == (96, 4096)
    expected = math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))
    assert parsed.rope_scaling["attention_factor"] == pytest.approx(expected)


def test_longrope_with_factors_of_another_length_is_refused() -> None:
    scaling = {"type": "longrope", "short_factor": [1.0] * 5, "long_factor": [1.0] * 5}
    config = {**SHAPE, "architectures": ["Phi3ForCausalLM"], "rope_scaling": scaling}
    with pytest.raises(RopeConfigError, match="has 5 short factors"):
        parse_llama_family_config(config)


def test_dynamic_ntk_runs_the_default_frequencies_within_its_context() -> None:
    hf = transformers.LlamaConfig(**SHAPE, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    dynamic, _ = ROPE_INIT_FUNCTIONS["dynamic"](hf, "cpu", seq_len=SHAPE["max_position_embeddings"])
    default = transformers.LlamaConfig(**SHAPE)
    rotary = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding
    plain, _ = rotary.compute_default_rope_parameters(default)
    np.testing.assert_array_equal(dynamic.numpy(), plain.numpy())
    parsed = parse_llama_family_config({**hf.to_dict(), "architectures": ["LlamaForCausalLM"]})
    assert (parsed.rope_type, parsed.max_position_embeddings) == ("dynamic", 4096)
