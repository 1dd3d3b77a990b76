"""GGUF config and weights for each supported architecture, against transformers.

Each case converts a tiny random transformers model to an F32 GGUF file the way llama.cpp
does, then checks our config and tensors against (a) transformers loading that GGUF file
and (b) the original model's state dict, which is what a correct loader must reproduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf_synth import convert, load_with_transformers, model_metadata, random_hf_model, write_gguf
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from vllm_tvm.checkpoints.gguf_config import hf_config_from_gguf
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights

_COMMON = dict(
    vocab_size=64,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
)


@dataclass
class Case:
    """One tiny model: GGUF arch, HF classes, config overrides, general.name."""

    arch: str
    model_cls: type
    config: Any
    name: str = "tiny"


CASES = {
    # GQA: llama's Q/K row permutation uses the head count of each projection.
    "llama": Case("llama", LlamaForCausalLM, LlamaConfig(**_COMMON, rope_theta=50000.0)),
    # llama.cpp stores Mistral models as llama, named e.g. like this (transformers 5.24
    # cannot load a file named exactly "mistral": it looks for a gguf arch of that name).
    "mistral-as-llama": Case(
        "llama",
        LlamaForCausalLM,
        LlamaConfig(**_COMMON, rope_theta=1e6),
        name="Mistral 7B Instruct v0.3",
    ),
    # Tied embeddings (no output.weight) and q/k/v biases, no row permutation.
    "qwen2": Case(
        "qwen2",
        Qwen2ForCausalLM,
        Qwen2Config(**_COMMON, tie_word_embeddings=True, rope_theta=1e6),
    ),
    # q_norm/k_norm and a head size (128) that is not hidden_size / heads; 128 is also
    # the head_dim transformers assumes for qwen3 GGUF files.
    "qwen3": Case(
        "qwen3",
        Qwen3ForCausalLM,
        Qwen3Config(**_COMMON, head_dim=128, tie_word_embeddings=False, rope_theta=1e6),
    ),
}


@dataclass
class Loaded:
    """A written case: our config and weights, transformers' view, and the source model."""

    ours: dict[str, Any]
    weights: GGUFWeights
    hf_config: Any
    hf_state: dict[str, np.ndarray]
    hf_class: str
    source: dict[str, np.ndarray]


@pytest.fixture(scope="module", params=list(CASES))
def loaded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    case = CASES[request.param]
    source = random_hf_model(case.model_cls, case.config)
    tensors = convert(source, case.arch, case.config).tensors
    path = write_gguf(
        Path(tmp_path_factory.mktemp(request.param)) / "model.gguf",
        case.arch,
        model_metadata(case.arch, case.config, case.name),
        tensors,
    )
    hf_config, hf_state, hf_class = load_with_transformers(path)
    return Loaded(
        hf_config_from_gguf(path), GGUFWeights(path), hf_config, hf_state, hf_class, source
    )


def test_config_architecture_names_the_transformers_class(loaded: Loaded) -> None:
    assert loaded.ours["architectures"] == [loaded.hf_class]


def test_config_sizes_match_transformers(loaded: Loaded) -> None:
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "max_position_embeddings",
        "vocab_size",
        "bos_token_id",
        "eos_token_id",
        "tie_word_embeddings",
    ):
        assert loaded.ours[key] == getattr(loaded.hf_config, key), key


def test_config_head_dim_matches_transformers_q_proj(loaded: Loaded) -> None:
    q_rows = loaded.hf_state["model.layers.0.self_attn.q_proj.weight"].shape[0]
    assert loaded.ours["head_dim"] == q_rows // loaded.hf_config.num_attention_heads


def test_config_attention_bias_matches_transformers_tensors(loaded: Loaded) -> None:
    has_bias = "model.layers.0.self_attn.q_proj.bias" in loaded.hf_state
    assert loaded.ours["attention_bias"] is has_bias


def test_config_norm_eps_and_rope_match_transformers(loaded: Loaded) -> None:
    assert math.isclose(loaded.ours["rms_norm_eps"], loaded.hf_config.rms_norm_eps, rel_tol=1e-6)
    ours = type(loaded.hf_config)(**loaded.ours)
    assert ours.rope_parameters == loaded.hf_config.rope_parameters


def test_config_is_float32_for_an_all_f32_file(loaded: Loaded) -> None:
    assert loaded.ours["torch_dtype"] == "float32"


def test_names_are_the_transformers_state_dict_minus_tied_lm_head(loaded: Loaded) -> None:
    expected = set(loaded.hf_state)
    if loaded.hf_config.tie_word_embeddings:
        expected.discard("lm_head.weight")
    assert set(loaded.weights.names()) == expected


def test_every_tensor_equals_transformers(loaded: Loaded) -> None:
    for name in loaded.weights.names():
        assert loaded.weights.shape(name) == loaded.hf_state[name].shape, name
        np.testing.assert_array_equal(loaded.weights.get(name), loaded.hf_state[name], name)


def test_every_tensor_equals_the_source_model(loaded: Loaded) -> None:
    for name in loaded.weights.names():
        np.testing.assert_array_equal(loaded.weights.get(name), loaded.source[name], name)


def test_llama_biases_are_returned_in_hf_order(tmp_path: Path) -> None:
    # transformers drops llama attention biases when loading GGUF, so the oracle here is
    # the source model alone: the converter permutes Q/K biases like the weights.
    config = LlamaConfig(**_COMMON, attention_bias=True)
    source = random_hf_model(LlamaForCausalLM, config)
    tensors = convert(source, "llama", config).tensors
    path = write_gguf(tmp_path / "m.gguf", "llama", model_metadata("llama", config), tensors)
    weights = GGUFWeights(path)
    assert weights.config["attention_bias"] is True
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        name = f"model.layers.1.self_attn.{proj}.bias"
        np.testing.assert_array_equal(weights.get(name), source[name], name)
