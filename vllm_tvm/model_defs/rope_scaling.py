"""RoPE scaling: HF `rope_scaling` / `rope_parameters` -> the rotation the model runs.

Why a module of its own: HF spells the same RoPE in two layouts (transformers 4's
`rope_theta` + `rope_scaling`, transformers 5's `rope_parameters`) and six types, while TVM's
KV cache rotates q/k itself with a few built-in formulas. Each supported type is mapped here
onto a rotation whose formula equals transformers' (float32 rounding apart), either one of
the cache's own or the model's (rotary.py):

- `default`, `linear` (positions divided by `factor`), `llama3`: TVM's own formulas.
- `dynamic` (dynamic NTK): transformers uses the default frequencies for every sequence up
  to `max_position_embeddings` and grows the base only past it; the context is that length,
  so `dynamic` runs as `default`.
- `yarn` and `longrope`: both are "per-frequency inverse frequencies, then cos/sin times an
  attention factor". TVM 0.27's own longrope kernel does not build (its `if ext_factors:`
  tests a buffer's truth) and its yarn ramp runs over the raw channel index (the second half
  of the rotating channels gets other frequencies than transformers gives them), so the
  model rotates q/k itself for these two (model_defs/rotary.py) with the frequencies and the
  factor computed here exactly as transformers computes them, and the cache rotates nothing.
- `longrope` factors: transformers rotates with `short_factor` while a sequence is within
  `original_max_position_embeddings` and switches every position to `long_factor` past it.
  The paged KV cache keeps keys rotated once, so one set is compiled in (`LONGROPE_FACTOR_SETS`)
  and the engine's context (`max_model_len`, a compile option) picks it as vLLM does: the
  short factors with the context capped at `original_max_position_embeddings` (exact to
  transformers for every sequence) unless `max_model_len` exceeds that length; then the long
  factors at every position of every sequence with the context `max_position_embeddings`
  (exact to transformers for sequences past the original length, prompt included; shorter
  ones differ, transformers running them with the short factors). The attention factor is
  the same for both sets, as in transformers.
- `partial_rotary_factor`: only the first `int(head_dim * factor)` channels rotate.

Anything else is refused here, by name, before a compile starts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "dynamic", "yarn", "longrope")
LLAMA3_ROPE_KEYS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
)
YARN_DEFAULT_BETA_FAST = 32.0
YARN_DEFAULT_BETA_SLOW = 1.0
LONGROPE_SHORT = "short"
LONGROPE_LONG = "long"
LONGROPE_FACTOR_SETS = {LONGROPE_SHORT: "short_factor", LONGROPE_LONG: "long_factor"}
"""longrope's factor sets (normalised `factor_set`) and the HF key each is read from."""


MODEL_APPLIED_ROPE_TYPES = ("yarn", "longrope")
LAYER_ROPE_TYPES = ("default", "linear", "dynamic", *MODEL_APPLIED_ROPE_TYPES)
"""The types whose frequencies `rope_frequencies` computes (the model rotates with them
when its layers use different bases: the cache has one)."""


class RopeConfigError(ValueError):
    """A RoPE setting the KV cache cannot reproduce exactly."""


def _raw_rope(config: dict[str, Any]) -> tuple[float, str, dict[str, Any]]:
    """(theta, rope type, remaining parameters) from either transformers 4 or 5 spelling."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        theta = float(params["rope_theta"])
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    else:
        theta = float(config.get("rope_theta", 10000.0))
        scaling = dict(config.get("rope_scaling") or {})
    rope_type = scaling.pop("rope_type", None) or scaling.get("type") or "default"
    scaling.pop("type", None)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise RopeConfigError(
            f"unsupported rope_scaling type '{rope_type}'; supported: "
            + ", ".join(SUPPORTED_ROPE_TYPES)
        )
    return theta, rope_type, scaling


def partial_rotary_factor(config: dict[str, Any]) -> float:
    """Fraction of each head's channels that rotate (top level or inside rope_parameters)."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and "partial_rotary_factor" in params:
        return float(params["partial_rotary_factor"])
    return float(config.get("partial_rotary_factor") or 1.0)


def _original_length(config: dict[str, Any], scaling: dict[str, Any]) -> int:
    value = scaling.get("original_max_position_embeddings") or config.get(
        "original_max_position_embeddings"
    )
    return int(value or config.get("max_position_embeddings", 2048))


def _require_keys(rope_type: str, scaling: dict[str, Any], keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if scaling.get(k) is None]
    if missing:
        raise RopeConfigError(f"rope_scaling type '{rope_type}' is missing key '{missing[0]}'")


def _yarn_attention_factor(scaling: dict[str, Any], factor: float) -> float:
    """transformers' yarn attention factor (`0.1 ln(factor) + 1`, or mscale / mscale_all_dim)."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])

    def mscale(scale: float, weight: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * weight * math.log(scale) + 1.0

    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return mscale(factor, scaling["mscale"]) / mscale(factor, scaling["mscale_all_dim"])
    return mscale(factor)


def _longrope_attention_factor(scaling: dict[str, Any], context: int, original: int) -> float:
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling.get("factor") or context / original)
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def rope_settings(
    config: dict[str, Any], rotary_dim: int, max_model_len: int | None = None
) -> tuple[float, str, dict[str, Any], int]:
    """(theta, rope type, normalised parameters, context length run exactly) of an HF config.

    `rotary_dim` is the number of rotating channels per head (it sizes longrope's factors);
    `max_model_len` is the context an engine is compiled for (None: the checkpoint's), which
    only longrope reads (`longrope_factor_set`).
    """
    if rotary_dim % 2:
        raise RopeConfigError(
            f"unsupported rotary dimension {rotary_dim} (head_dim x partial_rotary_factor); "
            "supported: an even number"
        )
    theta, rope_type, scaling = _raw_rope(config)
    context = int(config.get("max_position_embeddings", 2048))
    if rope_type in ("default", "dynamic"):
        return theta, rope_type, {}, context
    if rope_type == "linear":
        _require_keys(rope_type, scaling, ("factor",))
        return theta, rope_type, {"factor": float(scaling["factor"])}, context
    if rope_type == "llama3":
        _require_keys(rope_type, scaling, LLAMA3_ROPE_KEYS)
        return theta, rope_type, {k: float(scaling[k]) for k in LLAMA3_ROPE_KEYS}, context
    original = _original_length(config, scaling)
    if rope_type == "yarn":
        _require_keys(rope_type, scaling, ("factor",))
        factor = float(scaling["factor"])
        params = {
            "factor": factor,
            "original_max_position_embeddings": original,
            "beta_fast": float(scaling.get("beta_fast") or YARN_DEFAULT_BETA_FAST),
            "beta_slow": float(scaling.get("beta_slow") or YARN_DEFAULT_BETA_SLOW),
            "truncate": bool(scaling.get("truncate", True)),
            "attention_factor": _yarn_attention_factor(scaling, factor),
        }
        return theta, rope_type, params, context
    factor_set = longrope_factor_set(max_model_len, original)
    key = LONGROPE_FACTOR_SETS[factor_set]
    _require_keys(rope_type, scaling, (key,))
    factors = [float(x) for x in scaling[key]]
    if len(factors) != rotary_dim // 2:
        raise RopeConfigError(
            f"rope_scaling type 'longrope' has {len(factors)} {factor_set} factors; "
            f"the rotary dimension {rotary_dim} needs {rotary_dim // 2}"
        )
    params = {
        "factor_set": factor_set,
        "factors": factors,
        "original_max_position_embeddings": original,
        "attention_factor": _longrope_attention_factor(scaling, context, original),
    }
    run_context = context if factor_set == LONGROPE_LONG else min(context, original)
    return theta, rope_type, params, run_context


def longrope_factor_set(max_model_len: int | None, original: int) -> str:
    """vLLM's choice of one longrope factor set per engine: the long factors when its context
    exceeds the original length, else the short ones."""
    if max_model_len is not None and max_model_len > original:
        return LONGROPE_LONG
    return LONGROPE_SHORT


def _yarn_divisors(params: dict[str, Any], theta: float, rotary_dim: int) -> np.ndarray:
    """Per-frequency divisors that turn the default frequencies into transformers' yarn ones."""

    def correction_dim(rotations: float) -> float:
        ratio = params["original_max_position_embeddings"] / (rotations * 2 * math.pi)
        return rotary_dim * math.log(ratio) / (2 * math.log(theta))

    low = correction_dim(params["beta_fast"])
    high = correction_dim(params["beta_slow"])
    if params["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(rotary_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1.0 - ramp
    return 1.0 / ((1.0 - extrapolation) / params["factor"] + extrapolation)


def kv_cache_rope(rope_type: str, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(position scale, TVM `rope_scaling` dict) for the types the KV cache rotates itself."""
    if rope_type == "linear":
        return 1.0 / params["factor"], {}
    if rope_type == "llama3":
        return 1.0, {"rope_type": "llama3", **params}
    return 1.0, {}


def model_applied_rope(
    rope_type: str, params: dict[str, Any], theta: float, rotary_dim: int
) -> tuple[np.ndarray, float] | None:
    """`rope_frequencies` for the types the model rotates itself (yarn, longrope), else None
    (the KV cache rotates)."""
    if rope_type not in MODEL_APPLIED_ROPE_TYPES:
        return None
    return rope_frequencies(rope_type, params, theta, rotary_dim)


def rope_frequencies(
    rope_type: str, params: dict[str, Any], theta: float, rotary_dim: int
) -> tuple[np.ndarray, float]:
    """(inverse frequencies [rotary_dim / 2] in float32, cos/sin factor) of one of
    `LAYER_ROPE_TYPES`, for the model's own rotation (rotary.py)."""
    if rope_type not in LAYER_ROPE_TYPES:
        raise RopeConfigError(
            f"unsupported rope_scaling type '{rope_type}' for a rotation by the model; "
            "supported: " + ", ".join(LAYER_ROPE_TYPES)
        )
    exponents = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
    inv_freq = 1.0 / theta**exponents
    if rope_type == "linear":
        return (inv_freq / params["factor"]).astype(np.float32), 1.0
    if rope_type == "yarn":
        inv_freq = inv_freq / _yarn_divisors(params, theta, rotary_dim)
    elif rope_type == "longrope":
        inv_freq = inv_freq / np.asarray(params["factors"], dtype=np.float64)
    else:
        return inv_freq.astype(np.float32), 1.0
    return inv_freq.astype(np.float32), float(params["attention_factor"])


def cache_rope_frequencies(
    rope_type: str, params: dict[str, Any], theta: float, rotary_dim: int
) -> tuple[np.ndarray, float]:
    """`rope_frequencies`, and Llama 3.1's `llama3` scaling, which the KV cache rotates
    with for the model: what a model over owned KV pages (owned_kv.py) rotates with itself
    where the cache would have."""
    if rope_type != "llama3":
        return rope_frequencies(rope_type, params, theta, rotary_dim)
    exponents = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
    return _llama3_frequencies(1.0 / theta**exponents, params).astype(np.float32), 1.0


def _llama3_frequencies(inv_freq: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    """Llama 3.1's scaling: wavelengths past `original_max_position_embeddings /
    low_freq_factor` slowed by `factor`, those under `.. / high_freq_factor` kept, and a
    smooth blend between (transformers' `_compute_llama3_parameters`)."""
    factor, original = params["factor"], params["original_max_position_embeddings"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = np.where(wavelength > original / low, inv_freq / factor, inv_freq)
    middle = (wavelength <= original / low) & (wavelength >= original / high)
    return np.where(middle, blended, scaled)
