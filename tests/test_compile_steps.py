"""The compile's IR rewrites are passes of the pipeline, and the library's `_metadata` is the
manifest's description of it: the sampling functions are added by the compiler with the
signatures the runtime calls, cuBLASLt dispatch happens only when asked for, and `_metadata`
returns exactly what the manifest records about the library."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tvm
from tvm import relax, tirx

from vllm_tvm.artifacts.backends import GEMM_CUBLASLT, GEMM_TIR
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.model_config import read_model_config
from vllm_tvm.compiler.build import compile_cached, make_request
from vllm_tvm.compiler.export import export_model
from vllm_tvm.compiler.gemm_dispatch import calls_cublaslt
from vllm_tvm.compiler.library_metadata import METADATA_FUNCTION, library_metadata
from vllm_tvm.compiler.pipeline import LibraryContents, rewrite_pipeline
from vllm_tvm.compiler.sampling_functions import SAMPLING_FUNCTIONS, AttachSamplingFunctions
from vllm_tvm.model_defs.architectures import family_for


def _dims(ty: relax.TensorType) -> list[str | int]:
    """A tensor type's shape: sizes as ints, symbolic ones by name."""
    return [dim.name if isinstance(dim, tirx.Var) else int(dim) for dim in ty.shape]


def _signature(function: relax.Function) -> list[tuple[str, list[str | int], str]]:
    """(name, shape, dtype) of each parameter."""
    return [(param.name, _dims(param.ty), str(param.ty.dtype)) for param in function.params]


def test_the_sampling_pass_adds_argmax_and_sample_as_the_runtime_calls_them() -> None:
    mod = AttachSamplingFunctions(512, gpu=False)(tvm.IRModule())
    assert _signature(mod["argmax"]) == [("logits", ["batch_size", 512], "float32")]
    assert _signature(mod["sample"]) == [
        ("logits", ["batch_size", 512], "float32"),
        ("temperature", ["batch_size"], "float32"),
        ("top_k", ["batch_size"], "int32"),
        ("top_p", ["batch_size"], "float32"),
        ("min_p", ["batch_size"], "float32"),
        ("keys", ["batch_size"], "uint32"),
    ]
    for name in SAMPLING_FUNCTIONS:
        returned = mod[name].ret_ty
        assert (_dims(returned), str(returned.dtype)) == (["batch_size"], "int32")


def test_model_definitions_export_no_sampling_functions(tiny_model_dir) -> None:
    config = read_model_config(tiny_model_dir("llama"))
    family = family_for(config)
    model = family.build_model(family.parse_config(config), "float32", tvm.target.Target("llvm"))
    assert not set(SAMPLING_FUNCTIONS) & set(model.export_spec())


@pytest.mark.parametrize(("gemm", "dispatched"), [(GEMM_CUBLASLT, True), (GEMM_TIR, False)])
def test_the_rewrite_phase_adds_the_library_functions_and_dispatches_only_when_asked(
    tiny_model_dir, gemm: str, dispatched: bool
) -> None:
    request = make_request(CompileOptions(tiny_model_dir("llama"), "cuda", "bfloat16", gemm=gemm))
    exported = export_model(request)
    assert not calls_cublaslt(exported.mod)
    vocab_size = exported.manifest.model_config["vocab_size"]
    contents = LibraryContents(vocab_size, gemm, library_metadata(exported.manifest))
    mod = rewrite_pipeline(request.target.make_target(), contents)(exported.mod)
    assert calls_cublaslt(mod) == dispatched
    functions = {gv.name_hint for gv, f in mod.functions_items() if isinstance(f, relax.Function)}
    assert functions == set(exported.manifest.functions)


def test_the_library_metadata_is_what_the_manifest_says_of_the_library(tiny_model_dir) -> None:
    artifact: Path = compile_cached(
        make_request(CompileOptions(tiny_model_dir("llama"))), show_progress=False
    )
    manifest = read_manifest(artifact)
    library = tvm.runtime.load_module(str(artifact / "model.so"))
    metadata = json.loads(
        str(tvm.runtime.vm.VirtualMachine(library, tvm.cpu())[METADATA_FUNCTION]())
    )
    assert metadata == json.loads(library_metadata(manifest))
    assert metadata["params"][0]["name"] == manifest.params[0].name
    assert (metadata["gemm"], metadata["attention"], metadata["cuda_graph"]) == (
        "tir",
        "tir",
        False,
    )
    assert "files" not in metadata and "compile_seconds" not in metadata
