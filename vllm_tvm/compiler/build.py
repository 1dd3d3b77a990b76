"""`vllm-tvm compile`: checkpoint config -> nn model -> Relax -> library + manifest.

The artifact depends on the model's *config* only (never on weight values), so one artifact
serves every checkpoint with the same config; the weights stay in the model directory and
are read by the runtime at load.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import tvm
from tqdm import tqdm
from tvm import relax

import vllm_tvm
from vllm_tvm.artifacts.cache import artifact_dir_for, artifact_key
from vllm_tvm.artifacts.manifest import LIBRARY_NAME, Manifest, write_manifest
from vllm_tvm.checkpoints.model_config import checkpoint_dtype, is_gguf, read_model_config
from vllm_tvm.checkpoints.weight_formats import NATIVE
from vllm_tvm.compiler.attention import (
    cudart_link_options,
    flashinfer_build_environment,
    resolve_attention,
)
from vllm_tvm.compiler.backends import (
    ATTENTION_FLASHINFER,
    ATTENTION_TIR,
    GEMM_BACKENDS,
    GEMM_CUBLASLT,
    GEMM_TIR,
)
from vllm_tvm.compiler.cuda_build import build_libcuda_stub, build_relax_module, export
from vllm_tvm.compiler.gemm_dispatch import dispatch_gemms_to_cublaslt
from vllm_tvm.compiler.pipeline import build_pipeline
from vllm_tvm.compiler.source_digest import compiler_source_digest
from vllm_tvm.compiler.targets import TargetSpec, resolve_target
from vllm_tvm.compiler.weight_plan import param_entry, plan_weight_formats
from vllm_tvm.kernels.cublaslt import EXTENSION_NAME, build_cublaslt_extension
from vllm_tvm.model_defs.quant_linear import apply_weight_formats
from vllm_tvm.model_defs.registry import family_for

SUPPORTED_DTYPES = ("float32", "float16", "bfloat16")
CUDA_GRAPH_ENV = "VLLM_TVM_CUDA_GRAPH"
"""`0` compiles CUDA artifacts without CUDA-graph capture (the plain path, for A/B runs)."""
METADATA_FUNCTION = "_metadata"


@dataclass(frozen=True)
class CompileRequest:
    """What to compile: a checkpoint, for a target, in a dtype; `weight_formats` names the
    weights compiled quantized (parameter name -> format; see compiler/weight_plan.py)."""

    model_path: Path
    target: TargetSpec
    dtype: str
    weight_formats: Mapping[str, str] = field(default_factory=dict, hash=False)
    cuda_graph: bool = False
    gemm: str = GEMM_TIR
    attention: str = ATTENTION_TIR


def make_request(
    model: str | Path,
    target: str = "llvm",
    dtype: str = "auto",
    weight_format: str = NATIVE,
    gemm: str = "auto",
    attention: str = ATTENTION_TIR,
) -> CompileRequest:
    """Validate user-facing compile options (target name, dtype, weight format) into a request.

    `weight_format`: `native` keeps the GGUF weights of a supported quant type quantized on
    the device, `dequantized` stores every weight as a float array. `gemm`: `cublaslt` runs
    float16/bfloat16 matmuls with a run-time row count through cuBLASLt (CUDA only), `tir`
    keeps every matmul a TIR kernel, `auto` is `cublaslt` where it applies. `attention`:
    `tir` or `flashinfer` (compiler/attention.py).
    """
    model_path = Path(model)
    config = read_model_config(model_path)
    spec = resolve_target(target)
    resolved_dtype = dtype
    if dtype == "auto":
        # A block-quantized GGUF is dequantized at load; on CPU it runs in fp32, which is
        # what the fp32 oracle computes (exact tokens), elsewhere in the file's float type.
        gguf_on_cpu = is_gguf(model_path) and spec.kind == "llvm"
        resolved_dtype = "float32" if gguf_on_cpu else checkpoint_dtype(config)
    if resolved_dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"unsupported dtype '{resolved_dtype}'; supported: auto, " + ", ".join(SUPPORTED_DTYPES)
        )
    formats = plan_weight_formats(model_path, config, spec, resolved_dtype, weight_format)
    resolved_gemm = _resolve_gemm(gemm, spec, resolved_dtype)
    resolved_attention = resolve_attention(attention, spec.kind, resolved_dtype)
    # Static-shape regions (all of `decode_single` between KV-cache calls) are captured into
    # CUDA graphs at run time, removing per-kernel launch and VM overhead.
    cuda_graph = spec.kind == "cuda" and os.environ.get(CUDA_GRAPH_ENV, "1") != "0"
    return CompileRequest(
        model_path, spec, resolved_dtype, formats, cuda_graph, resolved_gemm, resolved_attention
    )


def _resolve_gemm(gemm: str, spec: TargetSpec, dtype: str) -> str:
    """`auto` -> cublaslt on CUDA for 16-bit floats, else tir; cublaslt elsewhere is refused."""
    if gemm not in ("auto", *GEMM_BACKENDS):
        raise ValueError(f"unsupported gemm '{gemm}'; supported: auto, " + ", ".join(GEMM_BACKENDS))
    applies = spec.kind == "cuda" and dtype in ("float16", "bfloat16")
    if gemm == GEMM_CUBLASLT and not applies:
        raise ValueError(
            f"gemm 'cublaslt' needs a cuda target and dtype float16 or bfloat16; "
            f"got target '{spec.name}' and dtype '{dtype}'"
        )
    if gemm == "auto":
        return GEMM_CUBLASLT if applies else GEMM_TIR
    return gemm


def _attach_metadata(mod: tvm.IRModule, metadata: dict) -> tvm.IRModule:
    """Add `_metadata() -> str` so a library describes itself without its manifest."""
    builder = relax.BlockBuilder(mod)
    with builder.function(METADATA_FUNCTION, params=[]):
        builder.emit_func_output(tvm.ir.StringImm(json.dumps(metadata, sort_keys=True)))
    return builder.get()


def _attention_build_environment(request: CompileRequest):
    """FlashInfer's JIT environment when the request uses it; otherwise nothing."""
    if request.attention != ATTENTION_FLASHINFER:
        return contextlib.nullcontext()
    return flashinfer_build_environment(request.target.arch, build_libcuda_stub())


def cache_key_for(request: CompileRequest) -> str:
    """The content-addressed cache key of a request."""
    config = read_model_config(request.model_path)
    parsed = family_for(config).parse_config(config)
    target = json.dumps(
        {
            **request.target.resolved_config(),
            "cuda_graph": request.cuda_graph,
            "gemm": request.gemm,
            "attention": request.attention,
        },
        sort_keys=True,
    )
    return artifact_key(
        parsed.fingerprint(),
        target,
        request.dtype,
        tvm.__version__,
        compiler_source_digest(),
        request.weight_formats,
    )


def compile_model(request: CompileRequest, output_dir: Path, show_progress: bool = True) -> Path:
    """Compile `request` into the artifact directory `output_dir` (replaced atomically)."""
    started = time.perf_counter()
    config = read_model_config(request.model_path)
    family = family_for(config)
    model_config = family.parse_config(config)
    stages = tqdm(total=3, desc="compile", unit="stage", disable=not show_progress)

    stages.set_postfix_str("export")
    target = request.target.make_target()
    model = family.build_model(model_config, request.dtype, target, attention=request.attention)
    apply_weight_formats(model, request.weight_formats)
    with _attention_build_environment(request):
        mod, named_params = model.export_tvm(spec=model.export_spec())
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
            family.weight_sources,
            request.weight_formats,
        )
        for name, param in named_params
    ]
    extensions: list[str] = []
    if request.gemm == GEMM_CUBLASLT:
        mod, rewritten = dispatch_gemms_to_cublaslt(mod)
        if rewritten:
            extensions.append(EXTENSION_NAME)
    functions = [*model.export_spec().keys(), METADATA_FUNCTION]
    metadata = {
        "architecture": model_config.architecture,
        "model_config": model_config.to_dict(),
        "dtype": request.dtype,
        "target": request.target.name,
        "cuda_graph": request.cuda_graph,
        "gemm": request.gemm,
        "attention": request.attention,
        "functions": functions,
        "params": [param.name for param in params],
    }
    if request.weight_formats:
        metadata["weight_formats"] = dict(request.weight_formats)
    mod = _attach_metadata(mod, metadata)
    stages.update()

    stages.set_postfix_str(f"lower+build ({request.target.name})")
    # TVM 0.27's TIR common-subexpression pass emits a use-before-definition in the paged
    # KV cache's tree-attention kernel when llama3 RoPE is inlined there (seen compiling a
    # Llama-3.2-1B shape for sm_90a); nvcc and LLVM eliminate common subexpressions anyway.
    build_config = {
        "tirx.disable_cse_tir": True,
        "relax.backend.use_cuda_graph": request.cuda_graph,
    }
    with tvm.transform.PassContext(config=build_config):
        executable = build_relax_module(mod, request.target, relax_pipeline=build_pipeline(target))
    stages.update()

    stages.set_postfix_str("write artifact")
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=output_dir.parent))
    try:
        export(executable, staging / LIBRARY_NAME, request.target, link_options)
        if extensions:
            build_cublaslt_extension(staging / EXTENSION_NAME)
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
            extensions=extensions,
            weights_reference=str(request.model_path.resolve()),
            compile_seconds=round(time.perf_counter() - started, 2),
        )
        write_manifest(staging, manifest)
        if output_dir.exists():
            shutil.rmtree(output_dir)
        staging.rename(output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    stages.update()
    stages.close()
    return output_dir


def compile_cached(request: CompileRequest, show_progress: bool = True) -> Path:
    """The cached artifact for `request`, compiling it on first use."""
    output_dir = artifact_dir_for(cache_key_for(request))
    if (output_dir / "manifest.json").is_file():
        return output_dir
    return compile_model(request, output_dir, show_progress)
