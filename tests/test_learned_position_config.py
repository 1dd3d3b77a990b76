"""GPT-2 / OPT config variants the learned-position definition cannot run are refused by name."""

from __future__ import annotations

import pytest
import transformers

from vllm_tvm.model_defs.architectures import family_for
from vllm_tvm.model_defs.config import ModelConfigError

SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 32}


def _parse(config: transformers.PretrainedConfig, architecture: str):
    raw = {**config.to_dict(), "architectures": [architecture]}
    return family_for(raw).parse_config(raw)


def test_gpt2_sizes_are_read_from_gpt2_names() -> None:
    parsed = _parse(transformers.GPT2Config(**SHAPE, n_positions=256), "GPT2LMHeadModel")
    assert (parsed.hidden_size, parsed.intermediate_size, parsed.max_position_embeddings) == (
        64,
        256,
        256,
    )
    assert (parsed.position_offset, parsed.conv1d_weights, parsed.hidden_act) == (
        0,
        True,
        "gelu_new",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"scale_attn_by_inverse_layer_idx": True}, "unsupported scale_attn_by_inverse_layer_idx"),
        ({"add_cross_attention": True}, "unsupported add_cross_attention"),
        ({"activation_function": "silu"}, "unsupported activation_function 'silu'"),
    ],
)
def test_gpt2_variants_are_refused(change: dict, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        _parse(transformers.GPT2Config(**SHAPE, **change), "GPT2LMHeadModel")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"word_embed_proj_dim": 32}, "unsupported word_embed_proj_dim 32"),
        ({"do_layer_norm_before": False}, "unsupported do_layer_norm_before False"),
        ({"_remove_final_layer_norm": True}, "unsupported _remove_final_layer_norm True"),
    ],
)
def test_opt_variants_are_refused(change: dict, message: str) -> None:
    config = transformers.OPTConfig(**SHAPE, ffn_dim=128, **{"word_embed_proj_dim": 64, **change})
    with pytest.raises(ModelConfigError, match=message):
        _parse(config, "OPTForCausalLM")
