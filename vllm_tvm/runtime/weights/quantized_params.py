"""Loading the parameters an artifact reads as quantized blocks (manifest `format` != float).

Why this exists: such a parameter is one plane of a weight whose stored blocks the kernel
dequantizes itself, so it is only right for a checkpoint that stores exactly those blocks.
`check_quantized_sources` refuses any other checkpoint by tensor name before a byte of
weight data is read; `QuantizedPlanes` gets each weight's planes once and hands them out in
the manifest's order, concatenating fused q/k/v and gate/up row-wise.

Two kinds of source keep weights quantized: block sources (GGUF files, float checkpoints
quantized at load) offer ggml blocks (`raw`, `quant_type`) that checkpoints/gguf_repack.py
rearranges; plane sources (FP8 safetensors: checkpoints/fp8_weights.py) offer the planes
themselves (`planes`, `stored_type`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.checkpoints.gguf_repack import repack
from vllm_tvm.checkpoints.weight_formats import FLOAT, QuantFormat, quant_format
from vllm_tvm.runtime.weights.loader import WeightMismatchError, WeightSource

_RECOMPILE_HINT = "compile the artifact for this checkpoint, or with --weight-format dequantized"


def check_quantized_sources(entries: Sequence[ParamEntry], source: WeightSource) -> None:
    """Refuse `source` unless every quantized parameter's tensors are in its ggml type."""
    quantized = [entry for entry in entries if entry.format != FLOAT]
    if not quantized:
        return
    if not _is_plane_source(source) and not hasattr(source, "raw"):
        raise WeightMismatchError(
            f"parameter {quantized[0].name} is compiled to read {quantized[0].format} blocks of "
            f"a quantized checkpoint (GGUF, FP8), and this checkpoint is not one; "
            f"{_RECOMPILE_HINT}"
        )
    available = set(source.names())
    for entry in quantized:
        fmt = quant_format(entry.format)
        fmt.plane(entry.plane or "")
        if entry.concat_axis != 0:
            raise WeightMismatchError(
                f"parameter {entry.name} concatenates along axis {entry.concat_axis}; "
                "quantized weights concatenate along axis 0 only"
            )
        for name in entry.sources:
            if name not in available:
                raise WeightMismatchError(
                    f"checkpoint has no tensor '{name}' (needed for parameter {entry.name})"
                )
            stored = _stored_type(source, name)
            if stored != fmt.ggml_type:
                raise WeightMismatchError(
                    f"checkpoint tensor '{name}' is stored as {stored}; the artifact reads it "
                    f"as {fmt.ggml_type} blocks (parameter {entry.name}); {_RECOMPILE_HINT}"
                )


class QuantizedPlanes:
    """Planes of quantized parameters from a GGUF source; each weight is repacked once."""

    def __init__(self, source: WeightSource) -> None:
        self._source = source
        self._weight: tuple[str, tuple[str, ...]] | None = None
        self._planes: dict[str, np.ndarray] = {}

    def get(self, entry: ParamEntry) -> np.ndarray:
        """The plane `entry` names, checked against the manifest's shape and dtype."""
        weight = (entry.format, tuple(entry.sources))
        if weight != self._weight:
            self._planes = self._repack(entry)
            self._weight = weight
        array = self._planes[quant_format(entry.format).plane(entry.plane or "").name]
        if list(array.shape) != entry.shape or str(array.dtype) != entry.dtype:
            raise WeightMismatchError(
                f"checkpoint tensor(s) {', '.join(entry.sources)} give a {entry.plane} plane of "
                f"shape {list(array.shape)} {array.dtype}; the artifact expects {entry.shape} "
                f"{entry.dtype} for {entry.name}"
            )
        return array

    def _repack(self, entry: ParamEntry) -> dict[str, np.ndarray]:
        fmt = quant_format(entry.format)
        parts = [_weight_planes(self._source, name, fmt) for name in entry.sources]
        return {
            plane.name: np.concatenate([part[plane.name] for part in parts], axis=0)
            if len(parts) > 1
            else parts[0][plane.name]
            for plane in fmt.planes
        }


def _is_plane_source(source: WeightSource) -> bool:
    return hasattr(source, "planes") and hasattr(source, "stored_type")


def _stored_type(source: WeightSource, name: str) -> str:
    """The stored type's name of tensor `name` (a ggml type name, or `F8_E4M3`)."""
    if _is_plane_source(source):
        return source.stored_type(name)  # type: ignore[attr-defined]
    return source.quant_type(name).name  # type: ignore[attr-defined]


def _weight_planes(source: WeightSource, name: str, fmt: QuantFormat) -> dict[str, np.ndarray]:
    if _is_plane_source(source):
        return source.planes(name)  # type: ignore[attr-defined]
    return repack(source.raw(name), fmt)  # type: ignore[attr-defined]
