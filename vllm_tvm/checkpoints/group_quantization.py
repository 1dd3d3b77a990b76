"""Group quantization of a float checkpoint into ggml block formats, done when weights load.

Why this exists: an edge user holds an fp16/bf16/fp32 Hugging Face checkpoint and wants it
four to eight times smaller on the device, without first converting it to GGUF. The compiled
model already has fused dequantizing matmuls for ggml's block formats (weight_formats.py,
model_defs/quant_linear.py); quantizing the float weights into exactly those blocks reuses
them on every target. The quantizer is the `gguf` package's, llama.cpp's own reference
implementation, so a weight quantized here has the bytes `llama-quantize` would write.

The methods (`--quantization`) are group quantizations with 32 values per group:

| method | per group of 32                   | bits/weight | dequantized value |
|--------|-----------------------------------|-------------|-------------------|
| q8_0   | symmetric, fp16 scale             | 8.5         | d * q             |
| q4_0   | symmetric, fp16 scale             | 4.5         | d * (q - 8)       |
| q4_1   | asymmetric, fp16 scale and min    | 5.0         | d * q + m         |

Weights whose row length is not a multiple of 32 stay float (compiler/weight_plan.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

    from vllm_tvm.checkpoints.gguf_weights import RawTensor

QUANTIZATION_METHODS: dict[str, str] = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1"}
"""`--quantization` methods -> the ggml block type each writes (the method is the manifest's
format name). Names only: the `gguf` package is imported when weights are quantized, not
by the option parsers that list the methods."""

GROUP_SIZE = 32
"""Values that share one scale (and min) in every method."""


def check_quantization(method: str | None) -> str | None:
    """`method` if it is None or a known method, else ValueError naming the known ones."""
    if method is not None and method not in QUANTIZATION_METHODS:
        raise ValueError(
            f"unsupported quantization {method!r}; supported: "
            + ", ".join(QUANTIZATION_METHODS)
            + " (pre-quantized checkpoints are read as their config says, without this option)"
        )
    return method


def ggml_type(method: str) -> GGMLQuantizationType:
    """The ggml block type `method` writes."""
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType[QUANTIZATION_METHODS[method]]


def quantize_rows(weight: np.ndarray, method: str) -> np.ndarray:
    """[rows, columns] float -> [rows, bytes per row] uint8 ggml blocks of `method`."""
    from gguf.quants import quantize

    return quantize(np.ascontiguousarray(weight, dtype=np.float32), ggml_type(method))


def round_trip(weight: np.ndarray, method: str) -> np.ndarray:
    """`weight` as the quantized model sees it: quantized, then dequantized (fp32)."""
    from gguf.quants import dequantize

    return dequantize(quantize_rows(weight, method), ggml_type(method)).reshape(weight.shape)


def relative_error(weight: np.ndarray, method: str) -> float:
    """||W - dequantize(quantize(W))|| / ||W|| (Frobenius; 0.0 for an all-zero weight)."""
    reference = np.asarray(weight, dtype=np.float32)
    norm = float(np.linalg.norm(reference))
    if norm == 0.0:
        return 0.0
    return float(np.linalg.norm(reference - round_trip(reference, method)) / norm)


class GroupQuantizedWeights:
    """A float checkpoint seen as a quantized one: `raw` quantizes a tensor on request.

    Float parameters read `get` unchanged; the weights the artifact keeps quantized read
    `raw` / `quant_type`, the interface of a GGUF source, so the runtime's block repacking
    serves both kinds of checkpoint.
    """

    def __init__(self, source: object, method: str) -> None:
        check_quantization(method)
        self._source = source
        self._method = method

    def names(self) -> list[str]:
        return self._source.names()  # type: ignore[attr-defined]

    def get(self, name: str) -> np.ndarray:
        return self._source.get(name)  # type: ignore[attr-defined]

    def quant_type(self, name: str) -> GGMLQuantizationType:
        """The block type every quantized weight gets (reads no tensor data)."""
        return ggml_type(self._method)

    def raw(self, name: str) -> RawTensor:
        """Tensor `name` quantized into blocks, one HF row per array row."""
        weight = np.asarray(self.get(name))
        if weight.ndim != 2 or weight.shape[-1] % GROUP_SIZE:
            raise ValueError(
                f"tensor {name!r} of shape {list(weight.shape)} cannot be quantized in groups "
                f"of {GROUP_SIZE}"
            )
        from vllm_tvm.checkpoints.gguf_weights import RawTensor

        blocks = quantize_rows(weight, self._method)
        return RawTensor(blocks, ggml_type(self._method), tuple(weight.shape))
