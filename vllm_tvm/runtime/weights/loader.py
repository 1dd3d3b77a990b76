"""Turning checkpoint tensors into the parameter list the compiled functions take.

The artifact's manifest lists every parameter in call order with the checkpoint tensors it
is made of (fused q/k/v and gate/up are concatenations). Loading checks each shape against
the manifest before anything runs, so a checkpoint that does not fit the artifact is refused
with the tensor's name instead of producing wrong output.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.checkpoints.weight_formats import FLOAT


class WeightSource(Protocol):
    """Read access to a checkpoint's tensors by HF name."""

    def names(self) -> list[str]: ...

    def get(self, name: str) -> np.ndarray: ...


class WeightMismatchError(ValueError):
    """A checkpoint whose tensors do not fit the artifact."""


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of an artifact dtype; ml_dtypes is imported for bfloat16 alone, so a
    start that loads none does not pay for its extension."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"float32": np.float32, "float16": np.float16}[name])


def open_weights(model_path: str | Path, quantization: str | None = None) -> WeightSource:
    """The weight source of a model directory (safetensors, with its declared quantization's
    scales applied: checkpoints/prequantized.py) or a GGUF file; with a `quantization`
    method, a float checkpoint whose weights are quantized as they are read."""
    path = Path(model_path)
    if path.is_file() and path.suffix == ".gguf":
        from vllm_tvm.checkpoints.gguf_weights import GGUFWeights

        if quantization is not None:
            raise WeightMismatchError(
                f"the artifact quantizes a float checkpoint's weights ({quantization}); "
                f"{path} is a GGUF file: compile an artifact for it without --quantization"
            )
        return GGUFWeights(path)
    from vllm_tvm.checkpoints.model_config import read_model_config
    from vllm_tvm.checkpoints.prequantized import open_prequantized
    from vllm_tvm.checkpoints.safetensors_weights import SafetensorsWeights

    source = open_prequantized(SafetensorsWeights(path), read_model_config(path))
    if quantization is None:
        return source
    from vllm_tvm.checkpoints.group_quantization import GroupQuantizedWeights

    return GroupQuantizedWeights(source, quantization)


def to_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """`array` in the artifact dtype `dtype` (bfloat16 rounded to nearest even)."""
    target = numpy_dtype(dtype)
    if array.dtype == target:
        return array
    if array.dtype.name == "bfloat16" or target.name == "bfloat16":
        # ml_dtypes converts through float32 with round-to-nearest-even.
        return array.astype(np.float32).astype(target)
    return array.astype(target)


def assemble_param(
    entry: ParamEntry, source: WeightSource, read: Callable[[str], np.ndarray] | None = None
) -> np.ndarray:
    """One parameter as a host array of the artifact's dtype and shape; `read(name)` reads
    each source tensor (default `source.get`; a tensor-parallel rank reads its slices)."""
    if entry.format != FLOAT:
        from vllm_tvm.runtime.weights.quantized_params import (
            QuantizedPlanes,
            check_quantized_sources,
        )

        check_quantized_sources([entry], source)
        return QuantizedPlanes(source).get(entry)
    available = set(source.names())
    missing = [name for name in entry.sources if name not in available]
    if missing:
        raise WeightMismatchError(
            f"checkpoint has no tensor '{missing[0]}' (needed for parameter {entry.name})"
        )
    read = read or source.get
    parts = [to_dtype(np.asarray(read(name)), entry.dtype) for name in entry.sources]
    array = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=entry.concat_axis)
    if list(array.shape) != entry.shape:
        raise WeightMismatchError(
            f"checkpoint tensor(s) {', '.join(entry.sources)} give shape {list(array.shape)}; "
            f"the artifact expects {entry.shape} for {entry.name}"
        )
    return np.ascontiguousarray(array)


def load_params(
    entries: list[ParamEntry], source: WeightSource, device: Any, show_progress: bool = True
) -> list[Any]:
    """Every parameter uploaded to `device` (a TVM device), in call order.

    Parameters stored quantized are checked against the checkpoint's tensor types first,
    so a checkpoint that does not fit is refused before any weight is read.
    """
    import tvm

    from vllm_tvm.runtime.weights.plane_cache import quantized_planes
    from vllm_tvm.runtime.weights.quantized_params import check_quantized_sources

    check_quantized_sources(entries, source)
    plane_of = quantized_planes(entries, source)
    uploaded = []
    for entry in tqdm(entries, desc="load weights", unit="tensor", disable=not show_progress):
        array = assemble_param(entry, source) if entry.format == FLOAT else plane_of(entry)
        uploaded.append(tvm.runtime.tensor(array, device))
    return uploaded
