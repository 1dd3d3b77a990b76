"""benchmarks/peers/write_random_gguf.py: the random GGUF has llama.cpp's llama layout.

Oracles: llama.cpp's tensor naming for the llama architecture (spelled out here), the public
parameter count of Llama-3.1-8B, transformers' llama3 rope initialisation, and the gguf
package's own reader.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

from llama31_8b import LLAMA_31_8B, tiny_shape
from write_random_gguf import (
    llama3_rope_factors,
    minimal_vocab,
    tensor_shapes,
    write_random_gguf,
)

gguf = pytest.importorskip("gguf")

LLAMA_LAYER_TENSORS = (
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_random_gguf(path, tiny_shape(), seed=0)
    return gguf.GGUFReader(str(path))


def field(reader, key: str):
    value = reader.fields[key]
    return value.contents() if hasattr(value, "contents") else value.parts[value.data[0]]


def test_tensor_names_are_llama_cpp_llama_names(tiny_gguf) -> None:
    expected = {"token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight"}
    expected |= {f"blk.{i}.{t}.weight" for i in range(2) for t in LLAMA_LAYER_TENSORS}
    assert {t.name for t in tiny_gguf.tensors} == expected


def test_tensor_dims_are_stored_input_first(tiny_gguf) -> None:
    s = tiny_shape()
    dims = {t.name: [int(d) for d in t.shape] for t in tiny_gguf.tensors}
    kv = s.num_key_value_heads * s.head_dim
    assert dims["token_embd.weight"] == [s.hidden_size, s.vocab_size]
    assert dims["output.weight"] == [s.hidden_size, s.vocab_size]
    assert dims["blk.0.attn_k.weight"] == [s.hidden_size, kv]
    assert dims["blk.1.ffn_gate.weight"] == [s.hidden_size, s.intermediate_size]
    assert dims["blk.1.ffn_down.weight"] == [s.intermediate_size, s.hidden_size]
    assert dims["rope_freqs.weight"] == [s.head_dim // 2]


def test_matrices_are_f16_and_vectors_f32(tiny_gguf) -> None:
    for t in tiny_gguf.tensors:
        expected = "F32" if len(t.shape) == 1 else "F16"
        assert t.tensor_type.name == expected, t.name


def test_weights_are_random_but_finite(tiny_gguf) -> None:
    q = next(t for t in tiny_gguf.tensors if t.name == "blk.0.attn_q.weight")
    values = np.asarray(q.data, dtype=np.float32)
    assert np.isfinite(values).all()
    assert 0.01 < values.std() < 0.03


def test_llama_metadata(tiny_gguf) -> None:
    s = tiny_shape()
    assert field(tiny_gguf, "general.architecture") == "llama"
    assert field(tiny_gguf, "general.file_type") == 1  # MOSTLY_F16
    assert field(tiny_gguf, "llama.block_count") == s.num_hidden_layers
    assert field(tiny_gguf, "llama.embedding_length") == s.hidden_size
    assert field(tiny_gguf, "llama.feed_forward_length") == s.intermediate_size
    assert field(tiny_gguf, "llama.attention.head_count") == s.num_attention_heads
    assert field(tiny_gguf, "llama.attention.head_count_kv") == s.num_key_value_heads
    assert field(tiny_gguf, "llama.rope.dimension_count") == s.head_dim
    assert field(tiny_gguf, "llama.rope.freq_base") == pytest.approx(500000.0)
    assert field(tiny_gguf, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)


def test_tokenizer_metadata_is_a_complete_bpe_vocab(tiny_gguf) -> None:
    s = tiny_shape()
    tokens = field(tiny_gguf, "tokenizer.ggml.tokens")
    assert field(tiny_gguf, "tokenizer.ggml.model") == "gpt2"
    assert field(tiny_gguf, "tokenizer.ggml.pre") == "llama-bpe"
    assert len(tokens) == s.vocab_size == len(set(tokens))
    assert len(field(tiny_gguf, "tokenizer.ggml.token_type")) == s.vocab_size
    assert len(field(tiny_gguf, "tokenizer.ggml.merges")) >= 1
    assert tokens[field(tiny_gguf, "tokenizer.ggml.bos_token_id")] == "<|begin_of_text|>"
    assert tokens[field(tiny_gguf, "tokenizer.ggml.eos_token_id")] == "<|end_of_text|>"


def test_vocab_has_byte_level_newline_so_llama_cpp_can_load_it() -> None:
    tokens, _, _ = minimal_vocab(1024)
    assert "\u010a" in tokens  # GPT-2's byte-level character for b"\n"
    assert tokens[ord("A")] == "A"


def test_full_vocab_puts_llama3_control_tokens_at_128000() -> None:
    tokens, types, _ = minimal_vocab(LLAMA_31_8B.vocab_size)
    assert tokens[128000] == "<|begin_of_text|>"
    assert tokens[128001] == "<|end_of_text|>"
    assert types[128000] == 3 and types[1000] == 1
    assert len(tokens) == 128256


def test_8b_shape_has_llama31_8b_parameter_count() -> None:
    shapes = tensor_shapes(LLAMA_31_8B)
    params = sum(int(np.prod(d)) for n, d in shapes.items() if n != "rope_freqs.weight")
    assert params == 8_030_261_248  # Llama-3.1-8B's published parameter count


def test_rope_factors_match_transformers_llama3_rope() -> None:
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    s = LLAMA_31_8B
    params = {
        "rope_type": "llama3",
        "rope_theta": s.rope_theta,
        "factor": s.rope_factor,
        "low_freq_factor": s.rope_low_freq_factor,
        "high_freq_factor": s.rope_high_freq_factor,
        "original_max_position_embeddings": s.rope_original_max_position_embeddings,
    }
    config = LlamaConfig(
        hidden_size=s.hidden_size,
        num_attention_heads=s.num_attention_heads,
        head_dim=s.head_dim,
        rope_parameters=params,
    )
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    default = 1.0 / s.rope_theta ** (torch.arange(0, s.head_dim, 2).double() / s.head_dim)
    expected = (default / scaled.double()).numpy()
    np.testing.assert_allclose(llama3_rope_factors(s), expected, rtol=1e-5)
