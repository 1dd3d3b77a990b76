"""`--attention`: TIR kernels by default, FlashInfer's on request, refused where it cannot work.

Compiling FlashInfer's kernels takes minutes per head size, so CI checks the choice and its
refusals only; the FlashInfer artifact is built and run on the H200 (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from vllm_tvm.artifacts.backends import ATTENTION_FLASHINFER, ATTENTION_TIR
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.compiler import attention
from vllm_tvm.compiler.attention import flashinfer_build_environment, resolve_attention
from vllm_tvm.compiler.build import cache_key_for, make_request


@pytest.fixture
def flashinfer_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(
        attention.importlib.metadata, "version", lambda name: attention.FLASHINFER_VERSION
    )


def test_tir_is_the_default(tiny_model_dir) -> None:
    assert (
        make_request(CompileOptions(tiny_model_dir("llama"), "cuda", "bfloat16")).attention
        == ATTENTION_TIR
    )


def test_unknown_attention_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unsupported attention 'flash'; supported: tir"):
        resolve_attention("flash", "cuda", "bfloat16")


@pytest.mark.parametrize(("kind", "dtype"), [("llvm", "float32"), ("cuda", "float32")])
def test_flashinfer_needs_cuda_and_16_bit_floats(kind, dtype, flashinfer_importable) -> None:
    with pytest.raises(ValueError, match="needs a cuda target and dtype float16 or bfloat16"):
        resolve_attention(ATTENTION_FLASHINFER, kind, dtype)


def test_flashinfer_without_its_packages_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        attention.importlib.util, "find_spec", lambda name: None if name == "flashinfer" else 1
    )
    with pytest.raises(ValueError, match=r"packages flashinfer \(scripts/install_flashinfer"):
        resolve_attention(ATTENTION_FLASHINFER, "cuda", "bfloat16")


def test_a_flashinfer_with_other_kernel_arguments_is_refused(
    monkeypatch: pytest.MonkeyPatch, flashinfer_importable
) -> None:
    monkeypatch.setattr(attention.importlib.metadata, "version", lambda name: "0.7.2")
    with pytest.raises(ValueError, match=r"needs flashinfer-python 0\.6\.15\.post1.*0\.7\.2 is"):
        resolve_attention(ATTENTION_FLASHINFER, "cuda", "bfloat16")


def test_attention_choice_changes_the_cache_key(tiny_model_dir, flashinfer_importable) -> None:
    model = tiny_model_dir("llama")
    assert cache_key_for(make_request(CompileOptions(model, "cuda", "bfloat16"))) != cache_key_for(
        make_request(CompileOptions(model, "cuda", "bfloat16", attention=ATTENTION_FLASHINFER))
    )


class _FakeJitSpec:
    """Stands in for flashinfer.jit.core.JitSpecNvcc: sources and the names it reports."""

    def __init__(self, sources: list[Path], build_dir: Path) -> None:
        self.sources = sources
        self.build_dir = build_dir

    def get_object_paths(self) -> list[Path]:
        return [self.build_dir / source.with_suffix(".cuda.o").name for source in self.sources]


@pytest.fixture
def fake_flashinfer(monkeypatch: pytest.MonkeyPatch) -> type[_FakeJitSpec]:
    import types

    core = types.ModuleType("flashinfer.jit.core")
    core.JitSpecNvcc = _FakeJitSpec
    for name in ("flashinfer", "flashinfer.jit"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "flashinfer.jit.core", core)
    return _FakeJitSpec


@pytest.mark.parametrize(
    ("arch", "arch_list"),
    [("sm_80", "8.0"), ("sm_89", "8.9"), ("sm_90a", "9.0a"), ("sm_100a", "10.0a")],
)
def test_build_environment_names_the_architecture(
    arch, arch_list, tmp_path: Path, fake_flashinfer
) -> None:
    if attention.shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    stub = tmp_path / "libcuda.so.1"
    stub.write_bytes(b"")
    before = dict(os.environ)
    with flashinfer_build_environment(arch, stub):
        assert os.environ["FLASHINFER_CUDA_ARCH_LIST"] == arch_list
        link_dir = Path(os.environ["LIBRARY_PATH"].split(os.pathsep)[0])
        assert (link_dir / "libcuda.so").resolve() == stub.resolve()
    assert dict(os.environ) == before


def test_objects_are_reported_under_the_names_the_build_writes(
    tmp_path: Path, fake_flashinfer
) -> None:
    if attention.shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    stub = tmp_path / "libcuda.so.1"
    stub.write_bytes(b"")
    spec = fake_flashinfer([Path("/src/batch_prefill/kernel_mask_0.cu")], tmp_path)
    (tmp_path / "batch_prefill_kernel_mask_0.cuda.o").write_bytes(b"")
    with flashinfer_build_environment("sm_90a", stub):
        assert spec.get_object_paths() == [tmp_path / "batch_prefill_kernel_mask_0.cuda.o"]
    assert spec.get_object_paths() == [tmp_path / "kernel_mask_0.cuda.o"]
