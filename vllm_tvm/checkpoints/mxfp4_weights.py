"""MXFP4 checkpoints (OCP Microscaling): blocks of 32 E2M1 values sharing one E8M0 scale.

Why this exists: gpt-oss and llm-compressor publish weights as MXFP4, 4.25 bits a weight:
two E2M1 codes per byte (low nibble first: element 2i in bits 0-3, 2i+1 in bits 4-7, as the
OCP MX spec packs them and as transformers' and compressed-tensors' unpackers read them) and
one uint8 E8M0 exponent per 32 values, w = e2m1 * 2**(e - 127). Two layouts name the same
data differently:

- gpt-oss (`quant_method: mxfp4`): `<name>_blocks` uint8 [out, in/32, 16] and
  `<name>_scales` uint8 [out, in/32] beside where `<name>` would be;
- compressed-tensors `mxfp4-pack-quantized`: `<name>_packed` uint8 [out, in/2] and
  `<name>_scale` uint8 [out, in/32], `<name>` ending in `weight`.

This view gives the fused kernel its planes (`qs`: uint32 words of eight codes in input
order; `e`: the uint8 exponents as stored) or the weight dequantized to float32 (what the
MoE families' per-expert weights get: their stacked experts are float parameters). Only 2-D
weights are read: gpt-oss's 3-D expert stacks belong to a family that is not served, and a
tensor of that shape is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_tvm.checkpoints.fp4_weights import E2M1_VALUES, e2m1_words, unpack_e2m1

MXFP4_BLOCK = 32
MXFP4_TYPE = "MXFP4"
E8M0_BIAS = 127


@dataclass(frozen=True)
class Mxfp4Layout:
    """Suffixes that turn a weight's name into its codes' and its scales' tensor names."""

    codes: str
    scales: str


GPT_OSS_LAYOUT = Mxfp4Layout("_blocks", "_scales")
COMPRESSED_TENSORS_LAYOUT = Mxfp4Layout("_packed", "_scale")


def check_compressed_tensors_mxfp4(quantization_config: dict[str, Any]) -> None:
    """ValueError unless every weight group of a compressed-tensors config is symmetric
    4-bit float in groups of 32 (what `mxfp4-pack-quantized` stores)."""
    for group_name, group in quantization_config.get("config_groups", {}).items():
        weights = group.get("weights") or {}
        found = (
            weights.get("num_bits", 4),
            weights.get("type", "float"),
            weights.get("group_size", MXFP4_BLOCK),
            weights.get("symmetric", True),
        )
        if found != (4, "float", MXFP4_BLOCK, True):
            raise ValueError(
                f"mxfp4-pack-quantized group {group_name!r} has (num_bits, type, group_size, "
                f"symmetric) = {found}; supported: (4, 'float', 32, True)"
            )


def dequantize_mxfp4(codes: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """4-bit codes [out, in] and E8M0 exponents [out, in/32] -> float32 [out, in]."""
    powers = np.repeat(exponents.astype(np.int32) - E8M0_BIAS, MXFP4_BLOCK, axis=1)
    return np.ldexp(E2M1_VALUES[codes], powers).astype(np.float32)


class Mxfp4Weights:
    """An MXFP4 checkpoint of `layout` seen by HF weight name."""

    def __init__(self, source: Any, layout: Mxfp4Layout) -> None:
        self._source = source
        self._layout = layout
        self._quantized = {
            n.removesuffix(layout.codes) for n in source.names() if n.endswith(layout.codes)
        }

    def names(self) -> list[str]:
        suffixes = (self._layout.codes, self._layout.scales)
        parts = {n + suffix for n in self._quantized for suffix in suffixes}
        return [n for n in self._source.names() if n not in parts] + sorted(self._quantized)

    def stored_type(self, name: str) -> str:
        """`MXFP4` for a packed weight, else the tensor's dtype."""
        return MXFP4_TYPE if name in self._quantized else str(self._source.get(name).dtype)

    def get(self, name: str) -> np.ndarray:
        """Tensor `name`; an MXFP4 weight dequantized to float32 [out, in]."""
        if name not in self._quantized:
            return self._source.get(name)
        return dequantize_mxfp4(*self._codes_and_exponents(name))

    def planes(self, name: str) -> dict[str, np.ndarray]:
        """The fused kernel's planes: `qs` (eight codes per uint32) and `e` (uint8)."""
        codes, exponents = self._codes_and_exponents(name)
        return {"qs": e2m1_words(codes), "e": np.ascontiguousarray(exponents)}

    def _codes_and_exponents(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        exponents = np.asarray(self._source.get(name + self._layout.scales))
        if exponents.dtype != np.uint8:
            raise ValueError(
                f"MXFP4 scales {name + self._layout.scales!r} are {exponents.dtype}; "
                "supported: uint8 E8M0 exponents"
            )
        if exponents.ndim != 2:
            raise ValueError(
                f"MXFP4 weight {name!r} is a {exponents.ndim + 1}-D stack (gpt-oss's expert "
                "layout); supported: 2-D linear weights"
            )
        packed = np.asarray(self._source.get(name + self._layout.codes))
        return unpack_e2m1(packed.reshape(exponents.shape[0], -1)), exponents
