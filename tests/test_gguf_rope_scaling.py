"""Rope scaling carried by GGUF metadata or by a ``rope_freqs`` tensor becomes HF rope_scaling.

transformers' GGUF loader ignores these, so the oracles are the llama.cpp keys the test
writes and, for Llama 3.x, transformers' own llama3 rope computation: the recovered
parameters must give the same rotary frequencies as the parameters the tensor was made from.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf_synth import SynthTensor, write_gguf
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from vllm_tvm.checkpoints.gguf_config import hf_config_from_gguf
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights


def write_llama(
    path: Path,
    head_dim: int,
    theta: float,
    extra: dict[str, Any],
    rope_freqs: np.ndarray | None = None,
) -> Path:
    heads = 2
    metadata = {
        "llama.context_length": 131072,
        "llama.embedding_length": heads * head_dim,
        "llama.block_count": 1,
        "llama.feed_forward_length": 64,
        "llama.attention.head_count": heads,
        "llama.rope.dimension_count": head_dim,
        "llama.rope.freq_base": theta,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        **extra,
    }
    embed = np.zeros((8, heads * head_dim), np.float32)
    tensors = [SynthTensor("token_embd.weight", embed, Q.F32)]
    if rope_freqs is not None:
        tensors.append(SynthTensor("rope_freqs.weight", rope_freqs.astype(np.float32), Q.F32))
    return write_gguf(path, "llama", metadata, tensors)


def test_no_scaling_gives_no_rope_scaling(tmp_path: Path) -> None:
    config = hf_config_from_gguf(write_llama(tmp_path / "m.gguf", 64, 1e4, {}))
    assert "rope_scaling" not in config


def test_linear_scaling(tmp_path: Path) -> None:
    extra = {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}
    config = hf_config_from_gguf(write_llama(tmp_path / "m.gguf", 64, 1e4, extra))
    assert config["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}


def test_yarn_scaling(tmp_path: Path) -> None:
    extra = {
        "llama.rope.scaling.type": "yarn",
        "llama.rope.scaling.factor": 4.0,
        "llama.rope.scaling.original_context_length": 32768,
        "llama.rope.scaling.yarn_beta_fast": 32.0,
    }
    config = hf_config_from_gguf(write_llama(tmp_path / "m.gguf", 64, 1e6, extra))
    assert config["rope_scaling"] == {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
        "beta_fast": 32.0,
    }


def test_unsupported_scaling_type_is_refused_by_name(tmp_path: Path) -> None:
    extra = {"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 4.0}
    path = write_llama(tmp_path / "m.gguf", 64, 1e4, extra)
    with pytest.raises(ValueError, match="unsupported rope scaling type 'longrope'; supported:"):
        hf_config_from_gguf(path)


def llama_cpp_rope_freqs(head_dim: int, theta: float, scaling: dict[str, Any]) -> np.ndarray:
    """The per-frequency divisors llama.cpp's converter writes for Llama 3.x rope scaling."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    context = scaling["original_max_position_embeddings"]
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * theta ** (i / head_dim)
        if wavelen < context / high:
            out.append(1.0)
        elif wavelen > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out)


def hf_inv_freq(config: dict[str, Any]) -> torch.Tensor:
    hf = LlamaConfig(**config)
    return ROPE_INIT_FUNCTIONS["llama3"](hf, torch.device("cpu"))[0]


LLAMA3_RELEASES = {
    "llama3.1-8b": (
        128,
        {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ),
    "llama3.2-1b": (
        64,
        {
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ),
}


@pytest.mark.parametrize("release", list(LLAMA3_RELEASES))
def test_llama3_rope_freqs_tensor_gives_the_same_hf_frequencies(
    tmp_path: Path, release: str
) -> None:
    head_dim, scaling = LLAMA3_RELEASES[release]
    theta = 500000.0
    divisors = llama_cpp_rope_freqs(head_dim, theta, scaling)
    config = hf_config_from_gguf(write_llama(tmp_path / "m.gguf", head_dim, theta, {}, divisors))
    # Every release used low_freq_factor 1, which the recovery pins, so all is recovered.
    assert config["rope_scaling"] == {"rope_type": "llama3", **scaling}
    original = {**config, "rope_scaling": {"rope_type": "llama3", **scaling}}
    torch.testing.assert_close(hf_inv_freq(config), hf_inv_freq(original), rtol=1e-5, atol=0)


def test_llama3_rope_freqs_is_config_not_a_weight(tmp_path: Path) -> None:
    head_dim, scaling = LLAMA3_RELEASES["llama3.2-1b"]
    divisors = llama_cpp_rope_freqs(head_dim, 500000.0, scaling)
    weights = GGUFWeights(write_llama(tmp_path / "m.gguf", head_dim, 500000.0, {}, divisors))
    assert weights.names() == ["model.embed_tokens.weight"]


def test_rope_freqs_of_another_shape_is_refused(tmp_path: Path) -> None:
    divisors = np.linspace(1.0, 8.0, 32) ** 2  # not llama3's 1 .. smooth .. factor profile
    path = write_llama(tmp_path / "m.gguf", 64, 500000.0, {}, divisors)
    with pytest.raises(ValueError, match=r"unsupported rope_freqs\.weight"):
        hf_config_from_gguf(path)
