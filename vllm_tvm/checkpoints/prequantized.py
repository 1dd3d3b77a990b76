"""Checkpoints that arrive quantized: which `quantization_config` methods are read, and how.

Why this exists: an HF checkpoint's `config.json` names its quantization method; reading its
tensors as if they were plain floats would run with wrong weights (or fail far from the
cause on a missing `.weight`). Each supported method wraps the safetensors source in a view
that applies its scales (checkpoints/fp8_weights.py); every other method is refused here by
name, before a compile starts or a weight is read.
"""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.fp8_weights import Fp8Scheme, Fp8Weights, fp8_scheme

SUPPORTED_METHODS = ("fp8", "compressed-tensors (float-quantized FP8)")


def prequantized_scheme(config: dict[str, Any]) -> Fp8Scheme | None:
    """The quantization scheme `config` declares (None: a float checkpoint); ValueError
    naming a method or format that is not read."""
    quantization = config.get("quantization_config")
    if not quantization:
        return None
    method = quantization.get("quant_method")
    if method == "fp8":
        return fp8_scheme(quantization)
    if method == "compressed-tensors":
        layout = quantization.get("format")
        if layout != "float-quantized":
            raise ValueError(
                f"compressed-tensors format {layout!r} is not supported; supported: "
                "float-quantized (FP8 weights)"
            )
        return fp8_scheme(quantization)
    raise ValueError(
        f"checkpoint quantization method {method!r} is not supported; supported: "
        + ", ".join(SUPPORTED_METHODS)
    )


def open_prequantized(source: Any, config: dict[str, Any]) -> Any:
    """`source` as the runtime reads it: wrapped in its method's view when `config` declares
    a quantization, unchanged otherwise."""
    scheme = prequantized_scheme(config)
    return source if scheme is None else Fp8Weights(source, scheme)
