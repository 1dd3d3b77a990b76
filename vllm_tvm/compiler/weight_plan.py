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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.compile_options import INT8_OFF
from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.checkpoints.fused_parts import WeightSources, part_sources
from vllm_tvm.checkpoints.group_quantization import GROUP_SIZE, check_quantization
from vllm_tvm.checkpoints.model_config import is_gguf, read_gguf_tensor_types
from vllm_tvm.checkpoints.prequantized import is_prequantized, open_prequantized
from vllm_tvm.checkpoints.safetensors_weights import SafetensorsWeights
from vllm_tvm.checkpoints.weight_formats import (
    DEQUANTIZED,
    WIDENED,
    check_weight_format_mode,
    choose_formats,
    quant_format,
)
from vllm_tvm.compiler.int8_activations import INTEGER_FORMATS
from vllm_tvm.compiler.recurrent_kernels import build_options
from vllm_tvm.compiler.targets import TargetSpec
from vllm_tvm.model_defs.architectures import family_for
from vllm_tvm.model_defs.quant_linear import fused_part_counts, quantizable_weights


def plan_weight_formats(
    model_path: Path,
    config: dict[str, Any],
    target: TargetSpec,
    dtype: str,
    mode: str,
    quantization: str | None = None,
    tensor_parallel_shards: int = 1,
    cpu_int8_activations: str = INT8_OFF,
) -> dict[str, str]:
    """Parameter name -> format name of every weight compiled quantized (empty: none).

    `mode` is `native` (GGUF weights of a supported quant type stay quantized) or
    `dequantized` (every weight is a float array, the path of checkpoints without blocks).
    `quantization` (checkpoints/group_quantization.py) quantizes a float checkpoint's linear
    and embedding weights whose rows are whole groups; a GGUF file is already quantized.
    F16 / BF16 weights stay 16-bit in unsplit fp32 CPU artifacts (`tensor_parallel_shards`
    1): a split takes float weights only. CPU artifacts keep the stored types of
    `weight_formats.WIDENED` in their wider format (the same values, streamed faster; see
    `widened_types` for the `cpu_int8_activations` choice).
    """
    check_weight_format_mode(mode)
    check_quantization(quantization)
    gguf = is_gguf(model_path)
    prequantized = not gguf and is_prequantized(config)
    if quantization is not None and (gguf or prequantized):
        kind = "a GGUF file" if gguf else "a checkpoint with a quantization_config"
        raise ValueError(
            f"--quantization {quantization} applies to float checkpoints; {model_path} is "
            f"{kind}, already quantized (use --weight-format to choose how it is kept)"
        )
    if quantization is None and (mode == DEQUANTIZED or not (gguf or prequantized)):
        return {}
    family = family_for(config)
    parsed = family.parse_config(config)
    tvm_target = target.make_target()
    model = family.build_model(
        parsed, dtype, tvm_target, **build_options(family.recurrent, tvm_target)
    )
    weight_sources = family.sources_for(parsed, model_path)
    if prequantized:
        return _prequantized_formats(model_path, config, model, weight_sources)
    if quantization is not None:
        return {
            name: quantization
            for name, shape in quantizable_weights(model).items()
            if int(shape[-1]) % GROUP_SIZE == 0
        }
    candidates = {
        name: (weight_sources(name)[0], shape) for name, shape in quantizable_weights(model).items()
    }
    on_cpu = target.kind == "llvm"
    keep_16_bit = on_cpu and dtype == "float32" and tensor_parallel_shards == 1
    splittable = _splittable(model, candidates) if on_cpu else set()
    tensor_types = read_gguf_tensor_types(model_path)
    widen = widened_types(cpu_int8_activations) if on_cpu else ()
    return choose_formats(candidates, tensor_types, keep_16_bit, splittable, widen)


def widened_types(cpu_int8_activations: str) -> list[str]:
    """The stored types a CPU build keeps in their wider format (weight_formats.WIDENED):
    all of them on the float path; with int8 activations possible (`on`, `auto`), those
    whose wider format an integer kernel multiplies (Q5_0 as Q8_0), so that the others keep
    their K-quant integer products."""
    if cpu_int8_activations == INT8_OFF:
        return list(WIDENED)
    return [t for t, fmt in WIDENED.items() if quant_format(fmt).kernel in INTEGER_FORMATS]


def _splittable(model: Any, candidates: dict[str, tuple[list[str], Any]]) -> set[str]:
    """Fused projections that may be kept quantized in parts (checkpoints/fused_parts.py):
    those whose model rows come from exactly their checkpoint tensors. CPU artifacts only:
    GPU schedules of the split products are not verified, so GPUs keep dequantizing them."""
    return {
        name
        for name, parts in fused_part_counts(model).items()
        if name in candidates and len(candidates[name][0]) == parts
    }


def _prequantized_formats(
    model_path: Path, config: dict[str, Any], model: Any, weight_sources: WeightSources
) -> dict[str, str]:
    """Weights of a pre-quantized safetensors checkpoint that the fused kernels read: all
    their tensors of one stored type that has a format (others are dequantized at load)."""
    view = open_prequantized(SafetensorsWeights(model_path), config)
    available = set(view.names())
    candidates = {
        name: (weight_sources(name)[0], shape) for name, shape in quantizable_weights(model).items()
    }
    tensor_types = {
        tensor: view.stored_type(tensor)
        for sources, _ in candidates.values()
        for tensor in sources
        if tensor in available
    }
    return choose_formats(candidates, tensor_types)


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
        sources, axis = part_sources(weight, weight_sources)
        return ParamEntry(name, list(shape), dtype, sources, axis, fmt.name, plane)
    sources, axis = weight_sources(name)
    return ParamEntry(name, list(shape), dtype, sources, axis)
