"""FP8 (E4M3) safetensors checkpoints: weights with their scales, dequantized or kept in FP8.

Why this exists: Meta, Qwen and DeepSeek ship FP8 checkpoints, and llm-compressor writes
them as compressed-tensors. Each weight is stored as `float8_e4m3fn` values and a float32
scale that the value is multiplied by (`w = q * s`): one scale per tensor, per output row,
or per block of rows x columns (DeepSeek-V3's 128 x 128, named `weight_scale_inv` though it
is a multiplier, as in DeepSeek's own `weight_dequant`). This view hands the runtime either
the dequantized fp32 weight (`get`, one multiply per value, the reference formula) or, for the
fused kernel, the raw FP8 bytes plus one scale per group of 32 columns of each row (`planes`;
model_defs/quant_linear.py multiplies in the same order, so both paths give equal values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

FP8_FORMAT = "fp8_e4m3"
"""The weight format name (checkpoints/weight_formats.py) of a weight kept in FP8."""

STORED_TYPE = "F8_E4M3"
"""The safetensors dtype of FP8 E4M3 values."""

SCALE_GROUP = 32
"""Columns that share one scale in the fused kernel's scale plane."""


@dataclass(frozen=True)
class Fp8Scheme:
    """Where a checkpoint keeps its FP8 scales and how they tile a weight."""

    scale_suffix: str
    """Name of a weight's scale tensor: `<weight name minus "weight">` + this."""
    block: tuple[int, int] | None = None
    """(rows, columns) one scale covers for block-scaled weights; None: per tensor or per
    output row, read from the scale's shape."""


def fp8_scheme(quantization_config: dict[str, Any]) -> Fp8Scheme:
    """The FP8 scheme of an HF `quantization_config` (`fp8` or compressed-tensors
    `float-quantized`); ValueError naming what is not FP8 E4M3 weights."""
    method = quantization_config.get("quant_method")
    if method == "fp8":
        # Block-scaled checkpoints (DeepSeek-V3, transformers' FineGrainedFP8) name the scale
        # `weight_scale_inv`; per-tensor ones (vLLM's fp8 layout) `weight_scale`.
        block = quantization_config.get("weight_block_size")
        if block:
            return Fp8Scheme("weight_scale_inv", (int(block[0]), int(block[1])))
        return Fp8Scheme("weight_scale")
    if method == "compressed-tensors":
        weights = _single_weight_scheme(quantization_config)
        if weights.get("type") != "float" or int(weights.get("num_bits", 0)) != 8:
            raise ValueError(
                "compressed-tensors weights of type "
                f"{weights.get('type')!r} with {weights.get('num_bits')} bits are not supported; "
                "supported: float 8-bit (float-quantized)"
            )
        block = weights.get("block_structure")
        return Fp8Scheme("weight_scale", (int(block[0]), int(block[1])) if block else None)
    raise ValueError(f"quantization method {method!r} is not FP8")


def fp8_row_scaled(quantization_config: dict[str, Any]) -> bool:
    """Whether an HF `quantization_config` holds FP8 weights with one scale per tensor or
    per output row (not block scales), the scales an FP8 x FP8 GEMM applies per row."""
    try:
        return fp8_scheme(quantization_config).block is None
    except ValueError:
        return False


def _single_weight_scheme(quantization_config: dict[str, Any]) -> dict[str, Any]:
    groups = list((quantization_config.get("config_groups") or {}).values())
    if len(groups) != 1 or not isinstance(groups[0].get("weights"), dict):
        raise ValueError(
            "compressed-tensors checkpoints with other than one config group of weights are "
            "not supported"
        )
    return groups[0]["weights"]


def scale_name(weight: str, scheme: Fp8Scheme) -> str:
    """The scale tensor of `weight` (`...q_proj.weight` -> `...q_proj.weight_scale`)."""
    return weight.removesuffix("weight") + scheme.scale_suffix


def expand_scale(
    scale: np.ndarray, shape: tuple[int, int], scheme: Fp8Scheme, columns_per_scale: int
) -> np.ndarray:
    """float32 [rows, columns / columns_per_scale]: the scale of each run of columns."""
    rows, columns = shape
    scale = np.asarray(scale, dtype=np.float32)
    starts = np.arange(0, columns, columns_per_scale)
    if scale.size == 1:
        return np.full((rows, len(starts)), scale.reshape(()), dtype=np.float32)
    if scheme.block is None:
        per_row = scale.reshape(rows, 1)
        return np.ascontiguousarray(np.broadcast_to(per_row, (rows, len(starts))))
    block_rows, block_columns = scheme.block
    if columns_per_scale > 1 and block_columns % columns_per_scale:
        raise ValueError(
            f"block scales of {block_columns} columns do not tile groups of {columns_per_scale}"
        )
    by_row = scale[np.arange(rows) // block_rows]
    return np.ascontiguousarray(by_row[:, starts // block_columns])


class Fp8Weights:
    """A checkpoint with FP8 weights seen with their scales applied (or kept apart)."""

    def __init__(self, source: Any, scheme: Fp8Scheme) -> None:
        self._source = source
        self._scheme = scheme
        self._scales = {n for n in source.names() if n.endswith(scheme.scale_suffix)}

    def names(self) -> list[str]:
        """Tensor names but the scales (and activation scales, unused for weight-only)."""
        return [
            n
            for n in self._source.names()
            if n not in self._scales and not n.endswith("input_scale")
        ]

    def is_fp8(self, name: str) -> bool:
        """Whether tensor `name` is stored as FP8 values."""
        return self._source.get(name).dtype == np.dtype(ml_dtypes.float8_e4m3fn)

    def get(self, name: str) -> np.ndarray:
        """Tensor `name` as stored, an FP8 weight dequantized to float32 (q * s)."""
        values = self._source.get(name)
        if not self.is_fp8(name):
            return values
        shape = (values.shape[0], values.shape[1])
        scale = self._scale(name, shape, columns_per_scale=1)
        return values.astype(np.float32) * scale

    def planes(self, name: str) -> dict[str, np.ndarray]:
        """The fused kernel's planes of FP8 weight `name`: `qs` (the E4M3 bytes) and `s`
        (float32, one scale per 32 columns of each row)."""
        values = self._source.get(name)
        if not self.is_fp8(name):
            raise ValueError(f"tensor {name!r} is not stored as FP8 E4M3")
        shape = (values.shape[0], values.shape[1])
        return {
            "qs": np.ascontiguousarray(values).view(np.uint8),
            "s": self._scale(name, shape, columns_per_scale=SCALE_GROUP),
        }

    def stored_type(self, name: str) -> str:
        """`F8_E4M3` for an FP8 weight the fused kernel reads, `F8_E4M3_BLOCKED` for one whose
        block scales do not tile groups of 32 columns (read dequantized), else the dtype."""
        if not self.is_fp8(name):
            return str(self._source.get(name).dtype)
        if self._scheme.block is not None and self._scheme.block[1] % SCALE_GROUP:
            return f"{STORED_TYPE}_BLOCKED"
        return STORED_TYPE

    def _scale(self, name: str, shape: tuple[int, int], columns_per_scale: int) -> np.ndarray:
        scale = self._source.get(scale_name(name, self._scheme))
        return expand_scale(scale, shape, self._scheme, columns_per_scale)
