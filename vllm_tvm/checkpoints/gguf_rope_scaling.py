"""HF `rope_scaling` from a GGUF file: its `rope.scaling.*` keys, or llama.cpp's
per-frequency divisors of Llama 3.x (`rope_freqs.weight`) turned back into `llama3` parameters.

Why apart: the recovery of the llama3 parameters from the divisors is its own small piece of
algebra with its own refusals; the config translation only asks for the result.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vllm_tvm.checkpoints.gguf_file import GGUFFile
from vllm_tvm.checkpoints.gguf_reader import float32_decimal, metadata_field

ROPE_FREQS_TENSOR = "rope_freqs.weight"
"""The tensor llama.cpp's converter writes for Llama 3.x `llama3` rope scaling: one divisor
per rotary frequency. It is folded into `rope_scaling` and is not a model weight."""

_ROPE_SCALING_TYPES = ("none", "linear", "yarn")


def rope_scaling_config(
    reader: GGUFFile, arch: str, head_dim: int, rope_theta: float
) -> dict[str, Any] | None:
    """HF ``rope_scaling`` from ``{arch}.rope.scaling.*`` keys or a ``rope_freqs`` tensor."""
    prefix = f"{arch}.rope.scaling."
    scaling_type = metadata_field(reader, prefix + "type", "none")
    rope_freqs = next((t for t in reader.tensors if t.name == ROPE_FREQS_TENSOR), None)
    if rope_freqs is not None:
        if scaling_type != "none":
            raise ValueError(
                f"unsupported rope scaling: both {prefix}type {scaling_type!r} and a "
                f"{ROPE_FREQS_TENSOR} tensor; supported: one of them"
            )
        return _llama3_rope_scaling(np.asarray(rope_freqs.data, np.float64), head_dim, rope_theta)
    if scaling_type not in _ROPE_SCALING_TYPES:
        raise ValueError(
            f"unsupported rope scaling type {scaling_type!r}; "
            f"supported: {', '.join(_ROPE_SCALING_TYPES)}, llama3 ({ROPE_FREQS_TENSOR})"
        )
    if scaling_type == "none":
        return None
    # llama.cpp's attention-scale knobs have no HF yarn/linear counterpart with the same
    # meaning; refuse rather than silently change the model.
    for knob in ("attn_factor", "yarn_log_multiplier", "yarn_ext_factor", "yarn_attn_factor"):
        if metadata_field(reader, prefix + knob, None) is not None:
            raise ValueError(
                f"unsupported GGUF key {prefix + knob!r}; supported rope scaling keys: "
                f"{prefix}type, factor, original_context_length, yarn_beta_fast, yarn_beta_slow"
            )
    scaling: dict[str, Any] = {
        "rope_type": scaling_type,
        "factor": metadata_field(reader, prefix + "factor"),
    }
    if scaling_type == "yarn":
        scaling["original_max_position_embeddings"] = metadata_field(
            reader, prefix + "original_context_length"
        )
        for knob in ("beta_fast", "beta_slow"):
            value = metadata_field(reader, f"{prefix}yarn_{knob}", None)
            if value is not None:
                scaling[knob] = value
    return scaling


def _llama3_frequency_divisors(
    inv_freq: np.ndarray, factor: float, low: float, high: float, context: float
) -> np.ndarray:
    """Per-frequency divisors of Llama 3 rope scaling (the same rule HF and llama.cpp use)."""
    wavelen = 2 * math.pi / inv_freq
    smooth = (context / wavelen - low) / (high - low)
    medium = 1.0 / ((1.0 - smooth) / factor + smooth)
    divisors = np.where(wavelen < context / high, 1.0, medium)
    return np.where(wavelen > context / low, factor, divisors)


def _llama3_rope_scaling(
    divisors: np.ndarray, head_dim: int, rope_theta: float
) -> dict[str, Any] | None:
    """Recover HF ``llama3`` rope parameters from llama.cpp's per-frequency divisors.

    The divisors are 1 for high frequencies, ``factor`` for low ones and, in between,
    ``1 / ((1 - s) / factor + s)`` with ``s`` linear in the frequency. That line fixes
    ``original_max_position_embeddings / (high - low)`` and ``low / (high - low)`` only, so
    ``low_freq_factor`` is pinned to 1 (its value in every Llama 3.x release) and the other
    two solved for; every solution yields the same rotary frequencies. The recovered
    parameters are checked by recomputing the divisors.
    """
    inv_freq = rope_theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if divisors.shape != inv_freq.shape:
        raise ValueError(
            f"unsupported {ROPE_FREQS_TENSOR} of {divisors.size} values; supported: "
            f"head_dim / 2 = {inv_freq.size} values"
        )
    if np.allclose(divisors, 1.0):
        return None
    factor = float(divisors.max())
    medium = (divisors > 1.0 + 1e-6) & (divisors < factor * (1.0 - 1e-6))
    if medium.sum() < 2:
        raise ValueError(
            f"unsupported {ROPE_FREQS_TENSOR} {divisors.tolist()}; supported: llama3 rope "
            "scaling with at least two smoothed frequencies"
        )
    smooth = (1.0 / divisors[medium] - 1.0 / factor) / (1.0 - 1.0 / factor)
    slope, intercept = np.polyfit(inv_freq[medium] / (2 * math.pi), smooth, 1)
    high = 1.0 - 1.0 / intercept
    context = round(float(slope * (high - 1.0)))
    scaling = {
        "rope_type": "llama3",
        "factor": float32_decimal(factor),
        "low_freq_factor": 1.0,
        "high_freq_factor": round(float(high), 4),
        "original_max_position_embeddings": context,
    }
    recomputed = _llama3_frequency_divisors(
        inv_freq, scaling["factor"], 1.0, scaling["high_freq_factor"], context
    )
    if not np.allclose(recomputed, divisors, rtol=1e-4):
        raise ValueError(
            f"unsupported {ROPE_FREQS_TENSOR} {divisors.tolist()}; supported: llama3 rope "
            "scaling divisors"
        )
    return scaling
