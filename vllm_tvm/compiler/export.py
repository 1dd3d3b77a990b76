"""Export, the first compile step: checkpoint config -> the model's Relax module and the
manifest its artifact will carry.

Why the manifest is made here: everything it says about the library (architecture, config,
runtime spec, dtype, target, compile options, functions, parameter table) is known once the model is
exported, and the library's `_metadata` is made from it (library_metadata.py), so each
fact is written down once. The build adds the extensions the library calls, the write the
files and the compile time.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import tvm

import vllm_tvm
from vllm_tvm.artifacts.backends import ATTENTION_FLASHINFER
from vllm_tvm.artifacts.manifest import Manifest
from vllm_tvm.checkpoints.model_config import read_model_config
from vllm_tvm.compiler.attention import (
    check_attention_softcap,
    cudart_link_options,
    flashinfer_build_environment,
)
from vllm_tvm.compiler.cuda_build import build_libcuda_stub
from vllm_tvm.compiler.int8_activations import int8_activation_isa
from vllm_tvm.compiler.kv_kernel_memo import memoised_kv_kernels
from vllm_tvm.compiler.library_metadata import METADATA_FUNCTION
from vllm_tvm.compiler.owned_kv_kernels import attach_owned_kernels, mark_owned_decode
from vllm_tvm.compiler.recurrent_kernels import build_options
from vllm_tvm.compiler.request import CompileRequest
from vllm_tvm.compiler.runtime_spec import runtime_spec_for
from vllm_tvm.compiler.sampling_functions import SAMPLING_FUNCTIONS
from vllm_tvm.compiler.speculative_variants import (
    config_for_role,
    family_for_role,
    model_for_role,
)
from vllm_tvm.compiler.weight_plan import param_entry
from vllm_tvm.model_defs.architectures import ModelFamily
from vllm_tvm.model_defs.quant_linear import apply_weight_formats
from vllm_tvm.model_defs.tensor_parallel import TensorParallelError, manifest_plan, with_shards
from vllm_tvm.schedules.cpu_rope import cpu_rope_kernels


@dataclass(frozen=True)
class ExportedModel:
    """An exported model, before any rewrite or lowering."""

    mod: tvm.IRModule
    """The model definition's functions (the KV cache's compiled objects attached)."""
    manifest: Manifest
    """The artifact's manifest, but for the extensions, files and compile time."""
    link_options: list[str]
    """Options of the library's final link (the CUDA runtime for FlashInfer's objects)."""


def _attention_build_environment(request: CompileRequest) -> AbstractContextManager[object]:
    """FlashInfer's JIT environment when the request uses it; otherwise nothing."""
    if request.attention != ATTENTION_FLASHINFER:
        return contextlib.nullcontext()
    return flashinfer_build_environment(request.target.arch, build_libcuda_stub())


def request_model_config(request: CompileRequest) -> tuple[ModelFamily, Any]:
    """The request's model family and parsed config (split over its tensor-parallel ranks;
    a split is refused by name for quantized weights)."""
    config = read_model_config(request.model_path)
    family = family_for_role(config, request.speculative_role)
    shards = request.tensor_parallel_shards
    if shards > 1 and (request.weight_formats or request.quantization):
        raise TensorParallelError("tensor parallelism is not supported for quantized weights")
    model_config = config_for_role(
        with_shards(family.parse_config(config, request.max_model_len), shards),
        request.speculative_role,
        request.aux_hidden_layers,
    )
    softcap = getattr(model_config, "attn_logit_softcapping", None)  # llama-family only
    check_attention_softcap(request.attention, softcap)
    return family, model_config


def export_model(request: CompileRequest) -> ExportedModel:
    """The Relax module of the request's model and the manifest of its artifact."""
    family, model_config = request_model_config(request)
    target = request.target.make_target()
    model = model_for_role(
        family.build_model(
            model_config,
            request.dtype,
            target,
            attention=request.attention,
            **build_options(family.recurrent, target),
        ),
        request.speculative_role,
    )
    apply_weight_formats(model, request.weight_formats)
    if request.options.owned_kv:
        attach_owned_kernels(
            model,
            target,
            request.speculative_role,
            bool(request.weight_formats),
            request.attention,
        )
    # The CPU RoPE kernel inside the memo: the memo's keys do not name the target.
    with _attention_build_environment(request), memoised_kv_kernels(), cpu_rope_kernels(target):
        mod, named_params = model.export_tvm(spec=model.export_spec())
    mod = mark_owned_decode(mod)
    link_options: list[str] = []
    if model.kv_cache_extern_mods:
        existing = list(mod.attrs["external_mods"]) if "external_mods" in mod.attrs else []
        mod = mod.with_attr("external_mods", [*existing, *model.kv_cache_extern_mods])
        link_options = cudart_link_options()
    params = [
        param_entry(
            name,
            [int(dim) for dim in param.shape],
            str(param.dtype),
            family.sources_for(model_config, request.model_path),
            request.weight_formats,
        )
        for name, param in named_params
    ]
    functions = [*model.export_spec(), *SAMPLING_FUNCTIONS, METADATA_FUNCTION]
    manifest = Manifest(
        architecture=model_config.architecture,
        config_hash=model_config.fingerprint(),
        model_config=model_config.to_dict(),
        target=request.target.name,
        target_kind=request.target.kind,
        dtype=request.dtype,
        tvm_version=tvm.__version__,
        vllm_tvm_version=vllm_tvm.__version__,
        functions=functions,
        params=params,
        runtime=runtime_spec_for(model, model_config, request.dtype, functions),
        weights_reference=str(request.model_path.resolve()),
        cuda_graph=request.cuda_graph,
        gemm=request.gemm,
        attention=request.attention,
        cpu_int8_activations=(
            int8_activation_isa(request.options.cpu_int8_activations, request.target) or "off"
        ),
        quantization=request.quantization,
        tensor_parallel=(
            manifest_plan({entry.name: entry.sources for entry in params}, model_config)
            if request.tensor_parallel_shards > 1
            else None
        ),
    )
    return ExportedModel(mod, manifest, link_options)
