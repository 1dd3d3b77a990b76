"""GGUF files we cannot serve are refused by name, from metadata and tensor infos alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize
from gguf_synth import SynthTensor, write_gguf

from vllm_tvm.checkpoints.gguf_config import check_gguf_supported, hf_config_from_gguf
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights

SUPPORTED_TYPES = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K"


def llama_metadata() -> dict[str, object]:
    return {
        "llama.context_length": 64,
        "llama.embedding_length": 32,
        "llama.block_count": 1,
        "llama.feed_forward_length": 64,
        "llama.attention.head_count": 2,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
    }


def matrix(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)


def test_unsupported_architecture_is_refused_by_name(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "g.gguf",
        "falcon",
        {"falcon.block_count": 1},
        [SynthTensor("token_embd.weight", matrix(8, 32), Q.F32)],
    )
    message = (
        "unsupported GGUF architecture 'falcon'; supported: llama, qwen2, qwen3, gemma, gemma2, "
        "gemma3"
    )
    with pytest.raises(ValueError, match=message):
        check_gguf_supported(path)
    with pytest.raises(ValueError, match=message):
        GGUFWeights(path)


def test_unsupported_quant_type_is_refused_by_name_with_its_tensor(tmp_path: Path) -> None:
    tensors = [
        SynthTensor("token_embd.weight", matrix(8, 32), Q.F32),
        SynthTensor("blk.0.attn_q.weight", quantize(matrix(32, 256), Q.TQ2_0), Q.TQ2_0),
        SynthTensor("blk.0.attn_k.weight", quantize(matrix(32, 256), Q.TQ2_0), Q.TQ2_0),
    ]
    path = write_gguf(tmp_path / "q.gguf", "llama", llama_metadata(), tensors)
    with pytest.raises(ValueError) as refused:
        hf_config_from_gguf(path)
    assert str(refused.value) == (
        "unsupported GGUF quant type 'TQ2_0' (tensor 'blk.0.attn_q.weight' and 1 more); "
        f"supported: {SUPPORTED_TYPES}"
    )
    with pytest.raises(ValueError, match="unsupported GGUF quant type 'TQ2_0'"):
        GGUFWeights(path)


def test_tensor_unknown_to_the_architecture_is_refused_by_name(tmp_path: Path) -> None:
    # q_norm exists in qwen3 files only; a llama model definition has no place for it.
    tensors = [
        SynthTensor("token_embd.weight", matrix(8, 32), Q.F32),
        SynthTensor("blk.0.attn_q_norm.weight", matrix(1, 16)[0], Q.F32),
    ]
    path = write_gguf(tmp_path / "t.gguf", "llama", llama_metadata(), tensors)
    with pytest.raises(
        ValueError,
        match=r"unsupported GGUF tensor 'blk\.0\.attn_q_norm\.weight' for architecture 'llama'",
    ):
        check_gguf_supported(path)


def test_split_file_is_refused(tmp_path: Path) -> None:
    metadata = {**llama_metadata(), "split.count": 2}
    path = write_gguf(
        tmp_path / "s.gguf",
        "llama",
        metadata,
        [SynthTensor("token_embd.weight", matrix(8, 32), Q.F32)],
    )
    with pytest.raises(ValueError, match=r"unsupported split GGUF file \(2 parts\)"):
        check_gguf_supported(path)


def test_per_layer_sizes_that_differ_are_refused(tmp_path: Path) -> None:
    metadata = {**llama_metadata(), "llama.block_count": 2, "llama.feed_forward_length": [64, 96]}
    path = write_gguf(
        tmp_path / "p.gguf",
        "llama",
        metadata,
        [SynthTensor("token_embd.weight", matrix(8, 32), Q.F32)],
    )
    with pytest.raises(ValueError, match=r"unsupported per-layer feed_forward_length \[64, 96\]"):
        hf_config_from_gguf(path)


def test_missing_hyper_parameter_is_named(tmp_path: Path) -> None:
    metadata = llama_metadata()
    del metadata["llama.block_count"]
    path = write_gguf(
        tmp_path / "m.gguf",
        "llama",
        metadata,
        [SynthTensor("token_embd.weight", matrix(8, 32), Q.F32)],
    )
    with pytest.raises(ValueError, match=r"lacks the metadata key 'llama\.block_count'"):
        hf_config_from_gguf(path)
