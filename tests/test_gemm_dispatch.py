"""CUDA artifacts run their run-time-row-count matmuls through the cuBLASLt extension.

What is checked here (no GPU): which calls the Relax pass rewrites, that the artifact carries
the extension and the manifest names it, how `--gemm` resolves, and that a missing
libcublasLt is refused by name. That the GEMM computes x @ w^T is checked on the H200
against torch.matmul (benchmarks/h200_llama.py --gemm-bench; docs/BENCHMARKS.md).
"""

from __future__ import annotations

import ctypes
import json
import shutil
import sys
from pathlib import Path

import pytest
import tvm
import tvm_ffi

from vllm_tvm.artifacts.backends import GEMM_CUBLASLT, GEMM_TIR
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest, sha256_of_file
from vllm_tvm.compiler.build import make_request
from vllm_tvm.compiler.gemm_dispatch import dispatch_gemms_to_cublaslt
from vllm_tvm.extensions import cublaslt
from vllm_tvm.model_defs.architectures import family_for

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")


def _exported(model_dir: Path, dtype: str) -> tvm.IRModule:
    config = json.loads((model_dir / "config.json").read_text())
    family = family_for(config)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    model = family.build_model(family.parse_config(config), dtype, target)
    mod, _ = model.export_tvm(spec=model.export_spec())
    return mod


def _calls(mod: tvm.IRModule, function: str) -> tuple[int, int]:
    """(cuBLASLt calls, nt_matmul call_tirs) in one Relax function."""
    script = mod[function].script()
    return script.count(cublaslt_function()), script.count("R.call_tir(nt_matmul")


def cublaslt_function() -> str:
    return "vllm_tvm.cublaslt.gemm_nt"


def test_prefill_and_batched_decode_matmuls_go_to_cublaslt(tiny_model_dir) -> None:
    config = json.loads((tiny_model_dir("llama") / "config.json").read_text())
    mod, rewritten = dispatch_gemms_to_cublaslt(_exported(tiny_model_dir("llama"), "bfloat16"))
    per_layer = 4  # qkv, o, gate_up, down
    expected = config["num_hidden_layers"] * per_layer + 1  # + lm_head
    assert _calls(mod, "prefill") == (expected, 0)
    assert _calls(mod, "decode") == (expected, 0)
    assert rewritten == 2 * expected


def test_static_single_row_decode_keeps_its_tir_gemvs(tiny_model_dir) -> None:
    mod, _ = dispatch_gemms_to_cublaslt(_exported(tiny_model_dir("llama"), "bfloat16"))
    cublas_calls, tir_calls = _calls(mod, "decode_single")
    assert cublas_calls == 0
    assert tir_calls > 0


def test_float32_models_are_left_alone(tiny_model_dir) -> None:
    _, rewritten = dispatch_gemms_to_cublaslt(_exported(tiny_model_dir("llama"), "float32"))
    assert rewritten == 0


def test_gemm_auto_means_cublaslt_for_16_bit_cuda_and_tir_elsewhere(tiny_model_dir) -> None:
    model = tiny_model_dir("llama")
    assert make_request(CompileOptions(model, "cuda", "bfloat16")).gemm == GEMM_CUBLASLT
    assert make_request(CompileOptions(model, "cuda", "float32")).gemm == GEMM_TIR
    assert make_request(CompileOptions(model, "llvm", "float32")).gemm == GEMM_TIR
    assert make_request(CompileOptions(model, "cuda", "bfloat16", gemm="tir")).gemm == GEMM_TIR


def test_cublaslt_on_a_cpu_target_is_refused_by_name(tiny_model_dir) -> None:
    with pytest.raises(ValueError, match="gemm 'cublaslt' needs a cuda target"):
        make_request(CompileOptions(tiny_model_dir("llama"), "llvm", "float32", gemm="cublaslt"))


def test_unknown_gemm_backend_is_refused_by_name(tiny_model_dir) -> None:
    with pytest.raises(ValueError, match="unsupported gemm 'cutlass'; supported: auto"):
        make_request(CompileOptions(tiny_model_dir("llama"), "cuda", "bfloat16", gemm="cutlass"))


def test_gemm_choice_changes_the_cache_key(tiny_model_dir) -> None:
    from vllm_tvm.compiler.build import cache_key_for

    model = tiny_model_dir("llama")
    assert cache_key_for(make_request(CompileOptions(model, "cuda", "bfloat16"))) != cache_key_for(
        make_request(CompileOptions(model, "cuda", "bfloat16", gemm="tir"))
    )


@needs_nvcc
def test_cuda_artifact_carries_the_extension_it_names(cuda_artifact: Path) -> None:
    manifest = read_manifest(cuda_artifact)
    assert manifest.extensions == [cublaslt.EXTENSION_NAME]
    extension = cuda_artifact / cublaslt.EXTENSION_NAME
    assert manifest.files[cublaslt.EXTENSION_NAME] == sha256_of_file(extension)


@needs_nvcc
def test_extension_registers_its_functions_when_loaded(cuda_artifact: Path) -> None:
    if tvm_ffi.get_global_func("vllm_tvm.cublaslt.init", allow_missing=True) is None:
        ctypes.CDLL(str(cuda_artifact / cublaslt.EXTENSION_NAME), mode=ctypes.RTLD_LOCAL)
    assert tvm_ffi.get_global_func("vllm_tvm.cublaslt.init", allow_missing=True) is not None
    assert tvm_ffi.get_global_func(cublaslt_function(), allow_missing=True) is not None


def test_missing_cublaslt_is_refused_naming_the_knob(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(cublaslt.LIBRARY_PATH_ENV, str(tmp_path / "libcublasLt.so.13"))
    monkeypatch.setattr(cublaslt, "_SONAMES", ())
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(cublaslt.CuBLASLtError, match=cublaslt.LIBRARY_PATH_ENV):
        cublaslt.find_cublaslt()


def test_a_missing_compiler_is_refused_naming_the_plain_path(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CXX", "no-such-compiler")
    with pytest.raises(cublaslt.CuBLASLtError, match="--gemm tir"):
        cublaslt.build_cublaslt_extension(tmp_path / "x.so")
