"""Checkpoints that arrive quantized: which `quantization_config` methods are read, and how.

Why this exists: an HF checkpoint's `config.json` names its quantization method; reading its
tensors as if they were plain floats would run with wrong weights (or fail far from the
cause on a missing `.weight`). Each supported method wraps the safetensors source in a view
by HF weight name that applies its scales (checkpoints/fp8_weights.py, int4_weights.py,
fp4_weights.py, mxfp4_weights.py) and reports each weight's stored type, from which the
compiler picks the fused format; every other method is refused here by name, before a
compile starts or a weight is read.
"""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.fp4_weights import Nvfp4Weights, check_nvfp4
from vllm_tvm.checkpoints.fp8_weights import Fp8Weights, fp8_scheme
from vllm_tvm.checkpoints.int4_weights import Int4Weights, int4_scheme
from vllm_tvm.checkpoints.mxfp4_weights import (
    COMPRESSED_TENSORS_LAYOUT,
    GPT_OSS_LAYOUT,
    Mxfp4Weights,
    check_compressed_tensors_mxfp4,
)

SUPPORTED_METHODS = (
    "fp8",
    "gptq (4-bit)",
    "awq (4-bit gemm)",
    "compressed-tensors (float-quantized FP8, pack-quantized int4, mxfp4-pack-quantized)",
    "modelopt (NVFP4)",
    "mxfp4 (gpt-oss layout)",
)
_COMPRESSED_TENSORS_FORMATS = ("float-quantized", "pack-quantized", "mxfp4-pack-quantized")


def check_prequantized(config: dict[str, Any]) -> None:
    """ValueError naming the quantization method or format of `config` that is not read."""
    _view_factory(config)


def open_prequantized(source: Any, config: dict[str, Any]) -> Any:
    """`source` as the runtime reads it: wrapped in its method's view when `config` declares
    a quantization, unchanged otherwise."""
    factory = _view_factory(config)
    return source if factory is None else factory(source)


def is_prequantized(config: dict[str, Any]) -> bool:
    """Whether `config` declares a (supported) quantization of its weights."""
    return _view_factory(config) is not None


def _view_factory(config: dict[str, Any]) -> Any:
    quantization = config.get("quantization_config")
    if not quantization:
        return None
    method = quantization.get("quant_method")
    if method == "compressed-tensors":
        layout = quantization.get("format")
        if layout not in _COMPRESSED_TENSORS_FORMATS:
            raise ValueError(
                f"compressed-tensors format {layout!r} is not supported; supported: "
                + ", ".join(_COMPRESSED_TENSORS_FORMATS)
            )
        if layout == "pack-quantized":
            scheme = int4_scheme(quantization)
            return lambda source: Int4Weights(source, scheme)
        if layout == "mxfp4-pack-quantized":
            check_compressed_tensors_mxfp4(quantization)
            return lambda source: Mxfp4Weights(source, COMPRESSED_TENSORS_LAYOUT)
    if method in ("fp8", "compressed-tensors"):
        fp8 = fp8_scheme(quantization)
        return lambda source: Fp8Weights(source, fp8)
    if method == "modelopt":
        check_nvfp4(quantization)
        return Nvfp4Weights
    if method == "mxfp4":
        return lambda source: Mxfp4Weights(source, GPT_OSS_LAYOUT)
    if method in ("gptq", "awq"):
        int4 = int4_scheme(quantization)
        return lambda source: Int4Weights(source, int4)
    raise ValueError(
        f"checkpoint quantization method {method!r} is not supported; supported: "
        + ", ".join(SUPPORTED_METHODS)
    )
