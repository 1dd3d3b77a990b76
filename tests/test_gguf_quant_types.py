"""Every supported GGUF quant type, in one tiny llama file, against independent oracles.

The file holds each type on at least one Q or K projection (whose rows llama.cpp permutes)
and on other matrices. Oracles: transformers loading the same file; the values the test
put in (exact for F32 and for the K-quants, whose blocks the test packs from chosen
integers; within quantization error for types ``gguf.quants.quantize`` produced); and the
exact block bytes the test wrote, for ``raw``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf_synth import (
    Conversion,
    convert,
    load_with_transformers,
    model_metadata,
    random_hf_model,
    write_gguf,
)
from transformers import LlamaConfig, LlamaForCausalLM

from vllm_tvm.checkpoints.gguf_weights import GGUFWeights

FLOAT_TYPES = [Q.F32, Q.F16, Q.BF16]
BLOCK_TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
TYPES = FLOAT_TYPES + BLOCK_TYPES

# Largest quantization error of the types quantized from floats, as a fraction of the
# tensor's largest magnitude: half a step, where a Q4_1 step spans 2/15 of it (Q5_1: 2/31);
# Q4_0 clips the extreme of the opposite sign to 7/8 of it (Q5_0: 15/16).
TOLERANCE = {Q.F16: 1e-3, Q.BF16: 4e-3, Q.Q8_0: 1 / 254, Q.Q4_0: 1 / 8, Q.Q4_1: 1 / 15}
TOLERANCE |= {Q.Q5_0: 1 / 16, Q.Q5_1: 1 / 31}

CONFIG = LlamaConfig(
    vocab_size=64,
    hidden_size=256,  # rows of K-quant blocks are 256 values long
    intermediate_size=256,
    num_hidden_layers=7,  # a Q and a K projection per type
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    bos_token_id=1,
    eos_token_id=2,
)


def quant_types(state: dict[str, Any]) -> dict[str, Q]:
    """Q of layer i gets TYPES[2i], K TYPES[2i+1]; other matrices cycle through TYPES."""
    chosen = {}
    others = itertools.count()
    for name, values in state.items():
        if values.ndim < 2:
            continue
        layer = int(name.split(".")[2]) if ".layers." in name else -1
        if name.endswith("q_proj.weight"):
            chosen[name] = TYPES[(2 * layer) % len(TYPES)]
        elif name.endswith("k_proj.weight"):
            chosen[name] = TYPES[(2 * layer + 1) % len(TYPES)]
        else:
            chosen[name] = TYPES[next(others) % len(TYPES)]
    return chosen


@dataclass
class Mixed:
    """The mixed-type file as written, as we read it and as transformers reads it."""

    qtypes: dict[str, Q]
    conversion: Conversion
    weights: GGUFWeights
    hf_state: dict[str, np.ndarray]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Mixed:
    source = random_hf_model(LlamaForCausalLM, CONFIG)
    qtypes = quant_types(source)
    conversion = convert(source, "llama", CONFIG, qtypes)
    path = write_gguf(
        Path(tmp_path_factory.mktemp("mixed")) / "mixed.gguf",
        "llama",
        model_metadata("llama", CONFIG),
        conversion.tensors,
    )
    _, hf_state, _ = load_with_transformers(path)
    return Mixed(qtypes, conversion, GGUFWeights(path), hf_state)


def names_of(mixed: Mixed, qtype: Q) -> list[str]:
    names = [name for name, t in mixed.qtypes.items() if t == qtype]
    assert any(n.endswith(("q_proj.weight", "k_proj.weight")) for n in names), names
    return names


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_dequantized_tensors_equal_transformers(mixed: Mixed, qtype: Q) -> None:
    for name in names_of(mixed, qtype):
        np.testing.assert_array_equal(mixed.weights.get(name), mixed.hf_state[name], name)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_dequantized_tensors_match_the_values_written(mixed: Mixed, qtype: Q) -> None:
    for name in names_of(mixed, qtype):
        expected = mixed.conversion.expected[name]
        atol = TOLERANCE.get(qtype, 0.0) * 1.01 * float(np.abs(expected).max())
        np.testing.assert_allclose(
            mixed.weights.get(name), expected, rtol=1e-6, atol=atol, err_msg=name
        )


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_raw_gives_the_stored_bytes_in_hf_row_order(mixed: Mixed, qtype: Q) -> None:
    for name in names_of(mixed, qtype):
        raw = mixed.weights.raw(name)
        stored = mixed.conversion.stored[name]
        assert raw.quant_type == qtype
        assert raw.shape == mixed.hf_state[name].shape
        np.testing.assert_array_equal(raw.data, stored.view(np.uint8), name)


def test_get_converts_to_the_requested_dtype(mixed: Mixed) -> None:
    name = "model.layers.0.self_attn.q_proj.weight"
    half = mixed.weights.get(name, dtype="float16")
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, mixed.hf_state[name].astype(np.float16))


def test_shape_is_the_hf_shape(mixed: Mixed) -> None:
    for name in mixed.weights.names():
        assert mixed.weights.shape(name) == mixed.hf_state[name].shape, name


def test_config_dtype_of_a_file_with_bf16_matrices_is_bfloat16(mixed: Mixed) -> None:
    assert mixed.weights.config["torch_dtype"] == "bfloat16"
