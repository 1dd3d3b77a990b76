"""The quantization-error report printed when a compile quantizes a float checkpoint.

Why this exists: group quantization loses information, and how much depends on the
checkpoint (outlier-heavy layers suffer most). The compile reads each weight it will
quantize once, measures its relative error after a quantize/dequantize round trip with the
same quantizer the loader uses, and prints the table, so the user sees the cost before
serving the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from vllm_tvm.checkpoints.group_quantization import relative_error
from vllm_tvm.checkpoints.safetensors_weights import SafetensorsWeights

WeightSources = Callable[[str], tuple[list[str], int]]


@dataclass(frozen=True)
class TensorError:
    """One checkpoint tensor's relative quantization error."""

    tensor: str
    relative_error: float


def quantization_errors(
    model_path: Path,
    weight_formats: Mapping[str, str],
    weight_sources: WeightSources,
    show_progress: bool = True,
) -> list[TensorError]:
    """The relative error of every checkpoint tensor behind a quantized parameter."""
    source = SafetensorsWeights(model_path)
    tensors = {
        tensor: method
        for param, method in weight_formats.items()
        for tensor in weight_sources(param)[0]
    }
    return [
        TensorError(tensor, relative_error(source.get(tensor), method))
        for tensor, method in tqdm(
            tensors.items(), desc="quantization error", unit="tensor", disable=not show_progress
        )
    ]


def format_report(method: str, errors: list[TensorError]) -> str:
    """A plain-text table: one line per tensor, then the mean and the worst."""
    if not errors:
        return f"quantization {method}: no weight has whole groups; nothing quantized"
    width = max(len(e.tensor) for e in errors)
    lines = [f"quantization {method}: relative error ||W - Q(W)|| / ||W|| per tensor"]
    lines += [f"  {e.tensor:<{width}}  {e.relative_error:.5f}" for e in errors]
    worst = max(errors, key=lambda e: e.relative_error)
    mean = sum(e.relative_error for e in errors) / len(errors)
    lines.append(f"  mean {mean:.5f}; worst {worst.relative_error:.5f} ({worst.tensor})")
    return "\n".join(lines)
