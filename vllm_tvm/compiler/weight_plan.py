"""Deciding, at compile time, which weights stay quantized, and describing them in the manifest.

Why this exists: with `--weight-format native` (the default) a GGUF weight whose ggml type
has a fused dequantizing matmul (weight_formats.FORMATS) is compiled to read its blocks
directly. The choice depends on the file's tensor types, not only on its config, so it is
made here from the tensor infos (no weight data is read), becomes part of the compile
request and its cache key, and is written per parameter into the manifest, from which the
runtime repacks the blocks and refuses a checkpoint whose types differ. The same holds for
FP8 safetensors weights (checkpoints/fp8_weights.py) and for float weights quantized at load
(`--quantization`, checkpoints/group_quantization.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.checkpoints.fp8_weights import FP8_FORMAT, SCALE_GROUP, Fp8Scheme, Fp8Weights
from vllm_tvm.checkpoints.group_quantization import GROUP_SIZE, check_quantization
from vllm_tvm.checkpoints.model_config import is_gguf, read_gguf_tensor_types
from vllm_tvm.checkpoints.prequantized import prequantized_scheme
from vllm_tvm.checkpoints.safetensors_weights import SafetensorsWeights
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
    model_path: Path,
    config: dict[str, Any],
    target: TargetSpec,
    dtype: str,
    mode: str,
    quantization: str | None = None,
) -> dict[str, str]:
    """Parameter name -> format name of every weight compiled quantized (empty: none).

    `mode` is `native` (GGUF weights of a supported quant type stay quantized) or
    `dequantized` (every weight is a float array, the path of checkpoints without blocks).
    `quantization` (checkpoints/group_quantization.py) quantizes a float checkpoint's linear
    and embedding weights whose rows are whole groups; a GGUF file is already quantized.
    """
    check_weight_format_mode(mode)
    check_quantization(quantization)
    gguf = is_gguf(model_path)
    fp8 = None if gguf else prequantized_scheme(config)
    if quantization is not None and (gguf or fp8 is not None):
        raise ValueError(
            f"--quantization {quantization} applies to float checkpoints; {model_path} is "
            "already quantized (use --weight-format to choose how it is kept)"
        )
    if quantization is None and (mode == DEQUANTIZED or (not gguf and fp8 is None)):
        return {}
    family = family_for(config)
    model = family.build_model(family.parse_config(config), dtype, target.make_target())
    if fp8 is not None:
        return _fp8_formats(model_path, model, family.weight_sources, fp8)
    if quantization is not None:
        return {
            name: quantization
            for name, shape in quantizable_weights(model).items()
            if int(shape[-1]) % GROUP_SIZE == 0
        }
    candidates = {
        name: (family.weight_sources(name)[0], shape)
        for name, shape in quantizable_weights(model).items()
    }
    return choose_formats(candidates, read_gguf_tensor_types(model_path))


def _fp8_formats(
    model_path: Path, model: Any, weight_sources: WeightSources, scheme: Fp8Scheme
) -> dict[str, str]:
    """FP8 weights the fused kernel reads: all their tensors FP8, rows of whole scale groups
    and block scales that tile them (others are dequantized at load)."""
    source = Fp8Weights(SafetensorsWeights(model_path), scheme)
    block_columns = scheme.block[1] if scheme.block else SCALE_GROUP
    available = set(source.names())
    chosen = {}
    for name, shape in quantizable_weights(model).items():
        tensors = weight_sources(name)[0]
        if (
            int(shape[-1]) % SCALE_GROUP == 0
            and block_columns % SCALE_GROUP == 0
            and all(t in available and source.is_fp8(t) for t in tensors)
        ):
            chosen[name] = FP8_FORMAT
    return chosen


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
