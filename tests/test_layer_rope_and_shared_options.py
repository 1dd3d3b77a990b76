"""Options that Gemma shares with the other Llama-family members resolve to one definition.

Gemma 3's per-layer RoPE bases use the model's own rotation (the one yarn and longrope use):
each layer's frequencies must equal those transformers' Gemma 3 rotary embedding keeps for
that layer's kind. The embedding scale and the
softmax scale each have one field or property whatever family sets them; the KV cache's
per-layer attention kinds come from the `cache_layers` hook. No compile here.
"""

from __future__ import annotations

import numpy as np
import pytest
import transformers
from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding
from tvm.target import Target

from vllm_tvm.model_defs.config import ModelConfigError, parse_llama_family_config
from vllm_tvm.model_defs.learned_positions import LearnedPositionForCausalLM
from vllm_tvm.model_defs.learned_positions_config import parse_learned_position_config
from vllm_tvm.model_defs.llama import LlamaForCausalLM
from vllm_tvm.model_defs.moe_config import parse_moe_config
from vllm_tvm.model_defs.rope_scaling import RopeConfigError, rope_frequencies

SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 64,
}


def _hf_dict(config_class: str, architecture: str, **overrides) -> dict:
    config = getattr(transformers, config_class)(**SHAPE, **overrides)
    return {**config.to_dict(), "architectures": [architecture]}


@pytest.mark.parametrize(
    "full_rope",
    [{"rope_type": "default"}, {"rope_type": "linear", "factor": 8.0}],
    ids=["default", "linear"],
)
def test_each_layer_rotates_with_transformers_frequencies_of_its_kind(full_rope) -> None:
    kinds = ["sliding_attention"] * 3 + ["full_attention"]
    hf = transformers.Gemma3TextConfig(
        **SHAPE,
        head_dim=16,
        sliding_window=32,
        layer_types=kinds,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {**full_rope, "rope_theta": 1e6},
        },
    )
    theirs = Gemma3RotaryEmbedding(hf)
    parsed = parse_llama_family_config({**hf.to_dict(), "architectures": ["Gemma3ForCausalLM"]})
    model = LlamaForCausalLM(parsed, "float32", Target("llvm"))
    for layer, kind in zip(model.model.layers, kinds, strict=True):
        inv_freq, factor = layer.self_attn.model_rope
        expected = getattr(theirs, f"{kind}_inv_freq").numpy()
        np.testing.assert_allclose(inv_freq, expected, rtol=1e-6)
        assert factor == getattr(theirs, f"{kind}_attention_scaling") == 1.0


def test_layer_rope_frequencies_refuse_llama3_by_name() -> None:
    with pytest.raises(RopeConfigError, match="'llama3'"):
        rope_frequencies("llama3", {}, 10000.0, 16)


def test_llama3_rope_with_a_sliding_layer_base_is_refused() -> None:
    hf = _hf_dict("Gemma3TextConfig", "Gemma3ForCausalLM", sliding_window=32)
    full = {
        "rope_type": "llama3",
        "rope_theta": 1e6,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    hf["rope_parameters"] = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": full,
    }
    with pytest.raises(ModelConfigError, match="'llama3' with a sliding-layer RoPE base"):
        parse_llama_family_config(hf)


def test_expert_models_refuse_activations_other_than_silu() -> None:
    hf = _hf_dict("MixtralConfig", "MixtralForCausalLM", hidden_act="gelu_pytorch_tanh")
    with pytest.raises(ModelConfigError, match="unsupported hidden_act 'gelu_pytorch_tanh'"):
        parse_moe_config(hf)


def test_embedding_and_softmax_scales_have_one_definition() -> None:
    granite = parse_llama_family_config(
        _hf_dict(
            "GraniteConfig",
            "GraniteForCausalLM",
            embedding_multiplier=12.0,
            attention_multiplier=0.25,
        )
    )
    assert (granite.embedding_scale, granite.attention_scale) == (12.0, 0.25)
    gemma2 = parse_llama_family_config(
        _hf_dict(
            "Gemma2Config",
            "Gemma2ForCausalLM",
            head_dim=16,
            query_pre_attn_scalar=64,
            attn_logit_softcapping=None,
        )
    )
    assert (gemma2.embedding_scale, gemma2.attention_scale) == (8.0, 64**-0.5)
    llama = parse_llama_family_config(_hf_dict("LlamaConfig", "LlamaForCausalLM"))
    assert (llama.embedding_scale, llama.attention_scale) == (1.0, 16**-0.5)


def test_kv_cache_layers_follow_the_sliding_layers() -> None:
    target = Target("llvm")
    gemma2 = parse_llama_family_config(
        _hf_dict(
            "Gemma2Config", "Gemma2ForCausalLM", sliding_window=24, attn_logit_softcapping=None
        )
    )
    layers = LlamaForCausalLM(gemma2, "float32", target).cache_layers()
    assert layers == {
        "attn_kind": ["mha_sliding", "mha", "mha_sliding", "mha"],
        "layer_sliding_window_size": 24,
    }
    gpt2 = parse_learned_position_config(
        {
            **transformers.GPT2Config(n_embd=64, n_layer=3, n_head=4, vocab_size=64).to_dict(),
            "architectures": ["GPT2LMHeadModel"],
        }
    )
    default = LearnedPositionForCausalLM(gpt2, "float32", target).cache_layers()
    assert default == {"attn_kind": ["mha"] * 3}
