"""`vllm-tvm compile`: checkpoint config -> nn model -> Relax -> library + manifest.

The artifact depends on the model's *config* only (never on weight values), so one artifact
serves every checkpoint with the same config; the weights stay in the model directory and
are read by the runtime at load. A compile is three steps: export (export.py: the model's
Relax module and its manifest), build (here: the pass pipeline and code generation) and
write (write.py: the artifact directory, replaced atomically).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tvm
from tqdm import tqdm

from vllm_tvm.artifacts.backends import ATTENTION_TIR, GEMM_CUBLASLT, GEMM_TIR
from vllm_tvm.artifacts.cache import artifact_dir_for, entry_lock
from vllm_tvm.artifacts.compile_options import GEMM_AUTO, CompileOptions, artifact_key, check_gemm
from vllm_tvm.artifacts.manifest import Manifest
from vllm_tvm.checkpoints.fp8_weights import fp8_row_scaled
from vllm_tvm.checkpoints.model_config import checkpoint_dtype, is_gguf, read_model_config
from vllm_tvm.checkpoints.weight_formats import NATIVE
from vllm_tvm.compiler.attention import resolve_attention
from vllm_tvm.compiler.cuda_build import build_relax_module
from vllm_tvm.compiler.export import ExportedModel, export_model, request_model_config
from vllm_tvm.compiler.fp8_gemm_dispatch import fp8_gemm_applies
from vllm_tvm.compiler.gemm_dispatch import calls_cublaslt
from vllm_tvm.compiler.int8_activations import int8_activation_isa, resolve_int8_activations
from vllm_tvm.compiler.library_metadata import library_metadata
from vllm_tvm.compiler.pipeline import LibraryContents, lowering_pipeline, rewrite_pipeline
from vllm_tvm.compiler.quantization_report import format_report, quantization_errors
from vllm_tvm.compiler.request import CompileRequest
from vllm_tvm.compiler.source_digest import compiler_source_digest
from vllm_tvm.compiler.speculative_variants import check_role
from vllm_tvm.compiler.targets import TargetSpec, resolve_target
from vllm_tvm.compiler.weight_plan import plan_weight_formats
from vllm_tvm.compiler.write import write_artifact
from vllm_tvm.extensions.cublaslt import EXTENSION_NAME
from vllm_tvm.model_defs.architectures import family_for

SUPPORTED_DTYPES = ("float32", "float16", "bfloat16")
CUDA_GRAPH_ENV = "VLLM_TVM_CUDA_GRAPH"
"""`0` compiles CUDA artifacts without CUDA-graph capture (the plain path, for A/B runs)."""


def make_request(options: CompileOptions) -> CompileRequest:
    """Resolve user-facing compile options (compile_options.py) into a request: the target's
    preset, the dtype (`auto`: the checkpoint's; a block-quantized GGUF on the CPU computes
    in float32), the weights kept quantized (weight_plan.py), the gemm backend (`auto`:
    cuBLASLt where it applies), the attention backend and the int8-activation path (`auto`:
    where the target and the weights allow it; int8_activations.py), each refused by name
    where it cannot be built."""
    check_role(options.speculative_role)
    model_path = Path(options.model)
    config = read_model_config(model_path)
    spec = resolve_target(options.target)
    dtype = options.dtype
    if dtype == "auto":
        # A block-quantized GGUF is dequantized at load; on CPU it runs in fp32, which is
        # what the fp32 oracle computes (exact tokens), elsewhere in the file's float type.
        gguf_on_cpu = is_gguf(model_path) and spec.kind == "llvm"
        dtype = "float32" if gguf_on_cpu else checkpoint_dtype(config)
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"unsupported dtype '{dtype}'; supported: auto, " + ", ".join(SUPPORTED_DTYPES)
        )
    formats = plan_weight_formats(
        model_path,
        config,
        spec,
        dtype,
        options.weight_format,
        options.quantization,
        options.tensor_parallel_size,
        options.cpu_int8_activations,
    )
    if spec.fat_archs and options.attention != ATTENTION_TIR:
        raise ValueError(
            f"attention '{options.attention}' builds FlashInfer's kernels for one SM; the fat "
            f"target '{spec.name}' needs attention '{ATTENTION_TIR}'"
        )
    resolved = replace(
        options,
        model=model_path,
        target=spec.name,
        dtype=dtype,
        gemm=_resolve_gemm(options.gemm, spec, dtype),
        attention=resolve_attention(options.attention, spec.kind, dtype),
        cpu_int8_activations=resolve_int8_activations(
            options.cpu_int8_activations, spec, dtype, formats
        ),
    )
    # Static-shape regions (all of `decode_single` between KV-cache calls) are captured into
    # CUDA graphs at run time, removing per-kernel launch and VM overhead.
    cuda_graph = spec.kind == "cuda" and os.environ.get(CUDA_GRAPH_ENV, "1") != "0"
    return CompileRequest(resolved, spec, formats, cuda_graph)


def _resolve_gemm(gemm: str, spec: TargetSpec, dtype: str) -> str:
    """`auto` -> cublaslt on CUDA for 16-bit floats, else tir; cublaslt elsewhere is refused."""
    check_gemm(gemm)
    applies = spec.kind == "cuda" and dtype in ("float16", "bfloat16")
    if gemm == GEMM_CUBLASLT and not applies:
        raise ValueError(
            f"gemm 'cublaslt' needs a cuda target and dtype float16 or bfloat16; "
            f"got target '{spec.name}' and dtype '{dtype}'"
        )
    if gemm == GEMM_AUTO:
        return GEMM_CUBLASLT if applies else GEMM_TIR
    return gemm


def cache_key_for(request: CompileRequest) -> str:
    """The content-addressed cache key of a request (compile_options.artifact_key): the
    model as its parsed config's fingerprint, which carries the context, the split over
    ranks and an EAGLE-3 target's layers (so those options are left to it: the model's own
    context and an explicit one that changes nothing share an artifact); the resolved
    options; the target as TVM configures it for this machine, the weights compiled
    quantized, CUDA-graph capture, TVM's version and the source of the code that builds
    it."""
    family, parsed = request_model_config(request)
    options = replace(
        request.options,
        weight_format=NATIVE,
        tensor_parallel_size=1,
        max_model_len=None,
        aux_hidden_layers=(),
    )
    depends_on = {
        "target": request.target.resolved_config(),
        "cuda_graph": request.cuda_graph,
        "fat_archs": list(request.target.fat_archs),
        "weight_formats": dict(request.weight_formats),
        "tvm": tvm.__version__,
        "build_source": compiler_source_digest(),
    }
    if family.checkpoint_layout is not None:
        depends_on["checkpoint_layout"] = family.checkpoint_layout(request.model_path).name
    return artifact_key(parsed.fingerprint(), options, depends_on)


@dataclass(frozen=True)
class BuiltLibrary:
    """A model's compiled library, not yet written, and its artifact's manifest."""

    executable: tvm.runtime.Executable
    manifest: Manifest
    """The exported manifest with the extensions the library calls."""


def build_library(exported: ExportedModel, request: CompileRequest) -> BuiltLibrary:
    """Run the pass pipeline over `exported` and generate the target's code."""
    target = request.target.make_target()
    contents = LibraryContents(
        vocab_size=exported.manifest.model_config["vocab_size"],
        gemm=request.gemm,
        metadata=library_metadata(exported.manifest),
        sliding_window=exported.manifest.model_config.get("sliding_window") is not None,
        fp8_gemm=_fp8_gemm(request),
        attn_logit_softcapping=exported.manifest.model_config.get("attn_logit_softcapping"),
        int8_isa=int8_activation_isa(request.options.cpu_int8_activations, request.target),
    )
    mod = rewrite_pipeline(target, contents)(exported.mod)
    extensions = [EXTENSION_NAME] if calls_cublaslt(mod) else []
    # TVM 0.27's TIR common-subexpression pass emits a use-before-definition in the paged
    # KV cache's tree-attention kernel when llama3 RoPE is inlined there (seen compiling a
    # Llama-3.2-1B shape for sm_90a); nvcc and LLVM eliminate common subexpressions anyway.
    build_config = {
        "tirx.disable_cse_tir": True,
        "relax.backend.use_cuda_graph": request.cuda_graph,
    }
    with tvm.transform.PassContext(config=build_config):
        executable = build_relax_module(
            mod,
            request.target,
            relax_pipeline=lowering_pipeline(target, contents.attn_logit_softcapping),
        )
    return BuiltLibrary(executable, replace(exported.manifest, extensions=extensions))


def _fp8_gemm(request: CompileRequest) -> bool:
    """Whether FP8 products go to cuBLASLt's FP8 GEMM: cuBLASLt in use, FP8 tensor cores,
    and FP8 weights scaled per tensor or per row (fp8_gemm_dispatch.py)."""
    quantization_config = read_model_config(request.model_path).get("quantization_config")
    return (
        request.gemm == GEMM_CUBLASLT
        and fp8_gemm_applies(request.target.arch)
        and quantization_config is not None
        and fp8_row_scaled(quantization_config)
    )


def compile_model(request: CompileRequest, output_dir: Path, show_progress: bool = True) -> Path:
    """Compile `request` into the artifact directory `output_dir` (replaced atomically)."""
    started = time.perf_counter()
    if request.quantization is not None:
        _report_quantization(request, show_progress)
    stages = tqdm(total=3, desc="compile", unit="stage", disable=not show_progress)
    stages.set_postfix_str("export")
    exported = export_model(request)
    stages.update()
    stages.set_postfix_str(f"lower+build ({request.target.name})")
    library = build_library(exported, request)
    stages.update()
    stages.set_postfix_str("write artifact")
    artifact = write_artifact(
        library.executable,
        library.manifest,
        request.target,
        exported.link_options,
        output_dir,
        started,
    )
    stages.update()
    stages.close()
    return artifact


def _report_quantization(request: CompileRequest, show_progress: bool) -> None:
    """Print each quantized tensor's relative error (compiler/quantization_report.py)."""
    family = family_for(read_model_config(request.model_path))
    config = family.parse_config(read_model_config(request.model_path))
    sources = family.sources_for(config, request.model_path)
    errors = quantization_errors(request.model_path, request.weight_formats, sources, show_progress)
    print(format_report(str(request.quantization), errors), file=sys.stderr)


def compile_cached(request: CompileRequest, show_progress: bool = True) -> Path:
    """The cached artifact for `request`, compiling it on first use (once, when several
    processes share the cache: the others wait for it under the entry's lock)."""
    output_dir = artifact_dir_for(cache_key_for(request))
    if (output_dir / "manifest.json").is_file():
        return output_dir
    with entry_lock(output_dir):
        if (output_dir / "manifest.json").is_file():
            return output_dir
        return compile_model(request, output_dir, show_progress)
