"""The HF config keys of the GGUF families that are not Llama-shaped in their metadata.

Why apart from gguf_config.py: Phi-3, Granite and GPT-2 each carry facts that llama.cpp's
converter spells its own way (Phi-3: a partial rotary size, longrope factors as tensors, an
attention factor and an original context; Granite: four multipliers under `*_scale` names;
GPT-2: LayerNorm and a learned position table, no RoPE at all). Each function here turns
one family's keys back into the HF `config.json` keys its transformers class reads, and
refuses what llama.cpp would compute differently from transformers. OLMo-2 needs nothing
here: its differences are all in its tensor names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from vllm_tvm.checkpoints.gguf_file import GGUFFile
from vllm_tvm.checkpoints.gguf_reader import float32_decimal
from vllm_tvm.checkpoints.gguf_tensor_names import ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT

Key = Callable[..., Any]
"""`key(name, default)`: the metadata value `{arch}.{name}` (gguf_config.py)."""

PARTIAL_ROTARY_ARCHITECTURES = ("phi3",)
"""Architectures whose `rope.dimension_count` may be smaller than the head (the first
channels rotate); their head size is `attention.key_length` or hidden / heads."""


def gpt2_config(key: Key) -> dict[str, Any]:
    """GPT2Config's own keys. llama.cpp runs GPT-2's MLP with ggml's tanh GELU, which is
    HF's `gelu_new`."""
    return {
        "n_embd": key("embedding_length"),
        "n_head": key("attention.head_count"),
        "n_layer": key("block_count"),
        "n_positions": key("context_length"),
        "n_inner": key("feed_forward_length"),
        "layer_norm_epsilon": key("attention.layer_norm_epsilon"),
        "activation_function": "gelu_new",
    }


def _phi3_options(reader: GGUFFile, key: Key, config: dict[str, Any]) -> dict[str, Any]:
    """Partial rotary, the sliding window (0: none) and longrope from the factor tensors.

    The converter writes `rope.scaling.attn_factor` as transformers derives it from the
    context lengths; a file whose factor differs is refused (the model would compute
    transformers' value).
    """
    head_dim = config["head_dim"]
    rope_dims = int(key("rope.dimension_count", head_dim))
    if rope_dims > head_dim:
        raise ValueError(
            f"unsupported phi3.rope.dimension_count {rope_dims}; supported: at most the head "
            f"size {head_dim}"
        )
    options: dict[str, Any] = {}
    if rope_dims != head_dim:
        options["partial_rotary_factor"] = rope_dims / head_dim
    window = key("attention.sliding_window", 0)
    if window:
        options["sliding_window"] = window
    original = key("rope.scaling.original_context_length", None)
    if original is not None:
        options["original_max_position_embeddings"] = original
    factors = {
        t.name: t for t in reader.tensors if t.name in (ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT)
    }
    if not factors:
        return options
    if len(factors) != 2:
        raise ValueError(
            f"unsupported Phi-3 GGUF with only {', '.join(factors)}; supported: both "
            f"{ROPE_FACTORS_LONG} and {ROPE_FACTORS_SHORT}, or neither"
        )
    context = int(config["max_position_embeddings"])
    _check_longrope_attention_factor(key("rope.scaling.attn_factor", None), context, original)
    options["rope_scaling"] = {
        "rope_type": "longrope",
        "long_factor": _factors(factors[ROPE_FACTORS_LONG].data),
        "short_factor": _factors(factors[ROPE_FACTORS_SHORT].data),
    }
    return options


def _factors(values: np.ndarray) -> list[float]:
    """Float32 factors as the decimals the original config.json had."""
    return [float32_decimal(float(v)) for v in np.asarray(values, np.float32).ravel()]


def _check_longrope_attention_factor(
    value: float | None, context: int, original: int | None
) -> None:
    if value is None:
        return
    scale = context / (original or context)
    derived = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
    if np.float32(value) != np.float32(derived):
        raise ValueError(
            f"unsupported phi3.rope.scaling.attn_factor {value}; supported: {derived:.7g}, the "
            f"longrope factor of context {context} over {original} that transformers derives"
        )


def _granite_options(reader: GGUFFile, key: Key, config: dict[str, Any]) -> dict[str, Any]:
    """Granite's multipliers. `logit_scale` is required (as llama.cpp requires it); an absent
    attention scale means 1 / sqrt(head size) and absent embedding / residual scales 1, as
    llama.cpp reads such a file."""
    del reader
    return {
        "logits_scaling": key("logit_scale"),
        "attention_multiplier": key("attention.scale", config["head_dim"] ** -0.5),
        "embedding_multiplier": key("embedding_scale", 1.0),
        "residual_multiplier": key("residual_scale", 1.0),
    }


FAMILY_OPTIONS: dict[str, Callable[[GGUFFile, Key, dict[str, Any]], dict[str, Any]]] = {
    "phi3": _phi3_options,
    "granite": _granite_options,
}
"""Per architecture: (reader, key, the Llama-shaped config so far) -> keys to add."""
