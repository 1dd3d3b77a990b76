"""Test helper: a tiny HF checkpoint written as one GGUF file in llama.cpp's layout for its family.

Why: the Phi-3, OLMo-2, Granite and GPT-2 GGUF readers must be checked on files laid out the
way llama.cpp's converter lays out each family, made from checkpoints whose transformers
model is the oracle. Tensor names come from the `gguf` package's own HF -> GGUF name map (not
from the reader's table); the per-family changes follow the converter's class for the family:
GPT-2's `Conv1D` weights transposed to [out, in], Granite's Q/K rows permuted like Llama's,
Phi-3's longrope factors written as two tensors with an attention factor beside them, and the
metadata keys each class writes. The tokenizer is the checkpoint's byte-level BPE as
`tokenizer.ggml.*` keys (the converter's gpt2 vocabulary), GPT-2 pre-tokenizer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf_synth import SynthTensor, gguf_name, llama_cpp_permute, write_gguf
from safetensors.numpy import load_file

FAMILY_ARCH = {
    "Phi3ForCausalLM": "phi3",
    "Olmo2ForCausalLM": "olmo2",
    "GraniteForCausalLM": "granite",
    "GPT2LMHeadModel": "gpt2",
}
GPT2_CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")
"""GPT-2's `Conv1D` weights, which the converter transposes."""


def write_family_gguf(model_dir: Path, path: Path, qtype: Q = Q.F32) -> dict[str, np.ndarray]:
    """Write `model_dir`'s checkpoint to `path` as llama.cpp would convert it, matrices in
    `qtype` (vectors stay F32); return per HF name the values a correct reader returns."""
    config = json.loads((model_dir / "config.json").read_text())
    arch = FAMILY_ARCH[config["architectures"][0]]
    state = load_file(model_dir / "model.safetensors")
    layers = int(config.get("num_hidden_layers") or config["n_layer"])
    tensors, expected = [], {}
    for hf_name, values in state.items():
        if hf_name.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # GPT-2's causal-mask buffers, dropped by the converter
        stored = _as_llama_cpp_stores(arch, config, hf_name, values)
        tensor_type = qtype if values.ndim > 1 else Q.F32
        data = stored if tensor_type == Q.F32 else gguf.quants.quantize(stored, tensor_type)
        if tensor_type == Q.F32:
            expected[hf_name] = values
        else:
            decoded = gguf.quants.dequantize(data, tensor_type).reshape(stored.shape)
            expected[hf_name] = _as_hf_stores(arch, config, hf_name, decoded)
        name = gguf_name(hf_name, gguf.MODEL_ARCH[arch.upper()], layers)
        tensors.append(SynthTensor(name, data, tensor_type))
    metadata = {**_METADATA[arch](config), **_tokenizer_metadata(model_dir)}
    tensors += _phi3_rope_factors(config) if arch == "phi3" else []
    write_gguf(path, arch, {"general.name": model_dir.name, **metadata}, tensors)
    return expected


def _as_llama_cpp_stores(
    arch: str, config: dict[str, Any], hf_name: str, values: np.ndarray
) -> np.ndarray:
    if arch == "gpt2" and hf_name.endswith(GPT2_CONV1D):
        return np.ascontiguousarray(values.T)
    if arch == "granite" and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
        heads = config["num_attention_heads" if "q_proj" in hf_name else "num_key_value_heads"]
        return llama_cpp_permute(values, heads)
    return values


def _as_hf_stores(
    arch: str, config: dict[str, Any], hf_name: str, stored: np.ndarray
) -> np.ndarray:
    """The inverse of `_as_llama_cpp_stores`."""
    if arch == "gpt2" and hf_name.endswith(GPT2_CONV1D):
        return np.ascontiguousarray(stored.T)
    if arch == "granite" and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
        heads = config["num_attention_heads" if "q_proj" in hf_name else "num_key_value_heads"]
        half = stored.shape[0] // heads // 2
        return stored.reshape(heads, half, 2, -1).swapaxes(1, 2).reshape(stored.shape)
    return stored


def _text_model(arch: str, c: dict[str, Any]) -> dict[str, Any]:
    """The keys every converter class based on TextModel writes (RoPE base, RMSNorm eps)."""
    return {
        f"{arch}.block_count": c["num_hidden_layers"],
        f"{arch}.context_length": c["max_position_embeddings"],
        f"{arch}.embedding_length": c["hidden_size"],
        f"{arch}.feed_forward_length": c["intermediate_size"],
        f"{arch}.attention.head_count": c["num_attention_heads"],
        f"{arch}.attention.head_count_kv": c["num_key_value_heads"],
        f"{arch}.rope.freq_base": float(c["rope_parameters"]["rope_theta"]),
        f"{arch}.attention.layer_norm_rms_epsilon": float(c["rms_norm_eps"]),
    }


def _phi3(c: dict[str, Any]) -> dict[str, Any]:
    rope = c["rope_parameters"]
    original = rope["original_max_position_embeddings"]
    rotary = int(rope.get("partial_rotary_factor", 1.0) * c["hidden_size"])
    meta = {
        **_text_model("phi3", c),
        "phi3.rope.scaling.original_context_length": original,
        "phi3.rope.dimension_count": rotary // c["num_attention_heads"],
        "phi3.attention.sliding_window": c.get("sliding_window") or 0,
    }
    if rope.get("long_factor"):
        scale = c["max_position_embeddings"] / original
        factor = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
        meta["phi3.rope.scaling.attn_factor"] = factor
    return meta


def _phi3_rope_factors(c: dict[str, Any]) -> list[SynthTensor]:
    rope = c["rope_parameters"]
    if not rope.get("long_factor"):
        return []
    return [
        SynthTensor(
            f"rope_factors_{kind}.weight", np.array(rope[f"{kind}_factor"], np.float32), Q.F32
        )
        for kind in ("long", "short")
    ]


def _olmo2(c: dict[str, Any]) -> dict[str, Any]:
    meta = _text_model("olmo2", c)
    rope = c["rope_parameters"]
    if rope.get("rope_type") == "yarn":
        meta["olmo2.rope.scaling.type"] = "yarn"
        meta["olmo2.rope.scaling.factor"] = float(rope["factor"])
        meta["olmo2.rope.scaling.original_context_length"] = rope[
            "original_max_position_embeddings"
        ]
    return meta


def _granite(c: dict[str, Any]) -> dict[str, Any]:
    # LlamaModel's keys (a dynamic rope_type writes nothing) plus the four multipliers.
    return {
        **_text_model("granite", c),
        "granite.vocab_size": c["vocab_size"],
        "granite.rope.dimension_count": c["hidden_size"] // c["num_attention_heads"],
        "granite.attention.scale": float(c["attention_multiplier"]),
        "granite.embedding_scale": float(c["embedding_multiplier"]),
        "granite.residual_scale": float(c["residual_multiplier"]),
        "granite.logit_scale": float(c["logits_scaling"]),
    }


def _gpt2(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "gpt2.block_count": c["n_layer"],
        "gpt2.context_length": c["n_positions"],
        "gpt2.embedding_length": c["n_embd"],
        "gpt2.feed_forward_length": 4 * c["n_embd"],
        "gpt2.attention.head_count": c["n_head"],
        "gpt2.attention.layer_norm_epsilon": float(c["layer_norm_epsilon"]),
    }


_METADATA = {"phi3": _phi3, "olmo2": _olmo2, "granite": _granite, "gpt2": _gpt2}


def _tokenizer_metadata(model_dir: Path) -> dict[str, Any]:
    """The checkpoint's tokenizer.json as llama.cpp's gpt2 vocabulary keys."""
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = spec["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.__getitem__)
    special = {added["id"] for added in spec["added_tokens"] if added["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    config = json.loads((model_dir / "config.json").read_text())
    pad = (
        {}
        if config.get("pad_token_id") is None
        else {"tokenizer.ggml.padding_token_id": config["pad_token_id"]}
    )
    return {
        **pad,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3 if i in special else 1 for i in range(len(tokens))],
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": config["bos_token_id"],
        "tokenizer.ggml.eos_token_id": config["eos_token_id"],
        "tokenizer.ggml.add_bos_token": False,
    }
