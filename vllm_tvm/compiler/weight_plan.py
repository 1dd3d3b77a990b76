"""Deciding, at compile time, which weights stay quantized, and describing them in the manifest.

Why this exists: with `--weight-format native` (the default) a GGUF weight whose ggml type
has a fused dequantizing matmul (weight_formats.FORMATS) is compiled to read its blocks
directly. The choice depends on the file's tensor types, not only on its config, so it is
made here from the tensor infos (no weight data is read), becomes part of the compile
request and its cache key, and is written per parameter into the manifest, from which the
runtime repacks the blocks and refuses a checkpoint whose types differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.checkpoints.model_config import is_gguf, read_gguf_tensor_types
from vllm_tvm.checkpoints.weight_formats import (
    DEQUANTIZED,
    check_weight_format_mode,
    choose_formats,
    quant_format,
)
from vllm_tvm.compiler.targets import TargetSpec
from vllm_tvm.model_defs.quant_linear import quantizable_weights
from vllm_tvm.model_defs.registry import family_for

WeightSources = Callable[[str], tuple[list[str], int]]


def plan_weight_formats(
    model_path: Path, config: dict[str, Any], target: TargetSpec, dtype: str, mode: str
) -> dict[str, str]:
    """Parameter name -> format name of every weight compiled quantized (empty: none).

    `mode` is `native` (GGUF weights of a supported quant type stay quantized) or
    `dequantized` (every weight is a float array, the path of checkpoints without blocks).
    """
    check_weight_format_mode(mode)
    if mode == DEQUANTIZED or not is_gguf(model_path):
        return {}
    family = family_for(config)
    parsed = family.parse_config(config)
    model = family.build_model(parsed, dtype, target.make_target())
    weight_sources = family.sources_for(parsed)
    candidates = {
        name: (weight_sources(name)[0], shape) for name, shape in quantizable_weights(model).items()
    }
    return choose_formats(candidates, read_gguf_tensor_types(model_path))


def param_entry(
    name: str,
    shape: Sequence[int],
    dtype: str,
    weight_sources: WeightSources,
    formats: Mapping[str, str],
) -> ParamEntry:
    """The manifest entry of compiled parameter `name`.

    A plane of a quantized weight (`<weight>.<plane>`) records the weight's format and
    checkpoint tensors; any other parameter is a float array of `dtype`.
    """
    weight, _, plane = name.rpartition(".")
    if weight in formats:
        fmt = quant_format(formats[weight])
        fmt.plane(plane)
        sources, axis = weight_sources(weight)
        return ParamEntry(name, list(shape), dtype, sources, axis, fmt.name, plane)
    sources, axis = weight_sources(name)
    return ParamEntry(name, list(shape), dtype, sources, axis)
