"""NVFP4 checkpoints (NVIDIA ModelOpt): 4-bit E2M1 weights with FP8 block scales.

Why this exists: ModelOpt exports Blackwell-era checkpoints as NVFP4: each weight is
`uint8` [out, in/2] holding two E2M1 values per byte (low nibble first), `weight_scale`
`float8_e4m3fn` [out, in/16] (one scale per 16 values) and `weight_scale_2`, one float32
scale per tensor; w = e2m1 * weight_scale * weight_scale_2. This view gives the fused kernel
its planes (`qs`: uint32 words of eight codes in input order; `s`: float32 [out, in/16],
the two scales multiplied once in float32) or the dequantized weight, computed as
e2m1 * (weight_scale * weight_scale_2) in float32, the kernel's order of operations.
"""

from __future__ import annotations

from typing import Any

import numpy as np

E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=np.float32,
)
"""The value of each 4-bit E2M1 code (sign bit 3, exponent bits 2-1, mantissa bit 0)."""

NVFP4_GROUP = 16
NVFP4_TYPE = "NVFP4"


def check_nvfp4(quantization_config: dict[str, Any]) -> None:
    """ValueError unless a ModelOpt config describes NVFP4 weights in groups of 16."""
    algorithm = str(quantization_config.get("quant_algo", "")).upper()
    if algorithm != "NVFP4":
        raise ValueError(
            f"modelopt quant_algo {quantization_config.get('quant_algo')!r} is not supported; "
            "supported: NVFP4"
        )
    group = int(quantization_config.get("group_size", NVFP4_GROUP))
    if group != NVFP4_GROUP:
        raise ValueError(f"NVFP4 group size {group} is not supported; supported: 16")


def unpack_e2m1(packed: np.ndarray) -> np.ndarray:
    """uint8 [out, in/2] -> 4-bit codes [out, in] (low nibble first)."""
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.stack([packed & 15, packed >> 4], axis=-1)
    return codes.reshape(packed.shape[0], -1)


def e2m1_words(codes: np.ndarray) -> np.ndarray:
    """4-bit codes [out, in] -> the `qs` plane: uint32 [out, in/8], eight codes per word in
    input order."""
    eights = codes.astype(np.uint32).reshape(codes.shape[0], -1, 8)
    eights = eights << np.arange(0, 32, 4, dtype=np.uint32)
    return np.ascontiguousarray(np.bitwise_or.reduce(eights, axis=-1).astype(np.uint32))


class Nvfp4Weights:
    """A ModelOpt NVFP4 checkpoint seen by HF weight name."""

    _PARTS = ("weight_scale", "weight_scale_2", "input_scale")

    def __init__(self, source: Any) -> None:
        self._source = source
        self._scaled = {
            n.removesuffix("_scale_2") for n in source.names() if n.endswith("weight_scale_2")
        }

    def names(self) -> list[str]:
        return [n for n in self._source.names() if n.rpartition(".")[2] not in self._PARTS]

    def stored_type(self, name: str) -> str:
        """`NVFP4` for a packed weight, else the tensor's dtype."""
        return NVFP4_TYPE if name in self._scaled else str(self._source.get(name).dtype)

    def get(self, name: str) -> np.ndarray:
        """Tensor `name`; an NVFP4 weight dequantized to float32 [out, in]."""
        if name not in self._scaled:
            return self._source.get(name)
        codes, scale = self._codes(name), self._scale(name)
        return E2M1_VALUES[codes] * np.repeat(scale, NVFP4_GROUP, axis=1)

    def planes(self, name: str) -> dict[str, np.ndarray]:
        """The fused kernel's planes: `qs` (eight codes per uint32) and `s` (float32)."""
        return {"qs": e2m1_words(self._codes(name)), "s": self._scale(name)}

    def _codes(self, name: str) -> np.ndarray:
        return unpack_e2m1(self._source.get(name))

    def _scale(self, name: str) -> np.ndarray:
        """float32 [out, in/16]: weight_scale * weight_scale_2, multiplied once."""
        block = np.asarray(self._source.get(name + "_scale")).astype(np.float32)
        tensor = np.float32(np.asarray(self._source.get(name + "_scale_2")).reshape(()))
        return np.ascontiguousarray(block * tensor)
