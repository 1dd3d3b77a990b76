"""Fat CUDA libraries: `--target cuda:all` (or a list of SMs) puts a cubin per SM plus the PTX
of the oldest into one library, which the driver picks from by compute capability.

Specification (issue "fat CUDA artifacts"): every SM nvcc 13 builds for from sm_80 on is a
preset; a fat build embeds exactly the SMs it names, checked with NVIDIA's `cuobjdump` (our
fatbin parser must agree with it); an export missing one is refused by name; the registry
fits a fat artifact to any GPU it has a cubin for, or one newer than its PTX.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from test_cuda_build import MODULE_SOURCE
from test_registry_index import H200, entry

from vllm_tvm.artifact_registry.machine import why_not
from vllm_tvm.compiler import cuda_binaries, cuda_build
from vllm_tvm.compiler.targets import CUDA_ARCHS, FAT_CUDA_ALL, resolve_target

NEW_PRESETS = ["sm_86", "sm_87", "sm_103a", "sm_110", "sm_121a"]

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
needs_cuobjdump = pytest.mark.skipif(
    cuda_binaries.find_cuobjdump() is None, reason="needs cuobjdump"
)


@pytest.fixture(scope="module")
def fat_executable(tmp_path_factory: pytest.TempPathFactory):
    """A matmul + SiLU module built once for cuda:all."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc (CUDA toolkit)")
    source_dir = tmp_path_factory.mktemp("fat_src")
    (source_dir / "fat_matmul_silu.py").write_text(MODULE_SOURCE)  # TVMScript needs a file
    sys.path.insert(0, str(source_dir))
    try:
        from fat_matmul_silu import MatmulSilu
    finally:
        sys.path.remove(str(source_dir))
    return cuda_build.build_relax_module(MatmulSilu, resolve_target(FAT_CUDA_ALL))


@pytest.fixture(scope="module")
def fat_library(tmp_path_factory: pytest.TempPathFactory, fat_executable) -> Path:
    path = tmp_path_factory.mktemp("fat_lib") / "lib.so"
    return cuda_build.export(fat_executable, path, resolve_target(FAT_CUDA_ALL))


@pytest.mark.parametrize("arch", NEW_PRESETS)
def test_the_sms_nvcc_13_supports_are_presets(arch: str) -> None:
    target = resolve_target(f"cuda:{arch}").make_target()
    assert str(target.attrs["arch"]) == arch


def test_cuda_all_names_every_sm_and_generates_code_for_the_oldest() -> None:
    spec = resolve_target(FAT_CUDA_ALL)
    assert spec.fat_archs == CUDA_ARCHS
    assert spec.name == "cuda:" + ",".join(CUDA_ARCHS)
    assert spec.arch == "sm_80"
    assert str(spec.make_target().attrs["arch"]) == "sm_80"
    assert resolve_target(spec.name) == spec  # the manifest's name resolves back


def test_a_list_is_ordered_deduplicated_and_its_code_sm_loses_the_suffix() -> None:
    spec = resolve_target("cuda:sm_100a, sm_90a,sm_100a")
    assert spec.fat_archs == ("sm_90a", "sm_100a")
    assert spec.arch == "sm_90"


def test_an_unknown_sm_in_a_list_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unsupported CUDA architecture 'sm_75'; supported: "):
        resolve_target("cuda:sm_80,sm_75")


def test_flashinfer_is_refused_for_a_fat_target(tiny_model_dir) -> None:
    from vllm_tvm.compiler.build import make_request

    with pytest.raises(ValueError, match=r"attention 'flashinfer' builds FlashInfer"):
        make_request(tiny_model_dir("llama"), target=FAT_CUDA_ALL, attention="flashinfer")


@needs_nvcc
@needs_cuobjdump
def test_the_fat_library_has_one_cubin_per_sm_and_the_oldest_sms_ptx(fat_library: Path) -> None:
    assert cuda_binaries.embedded_cuda_archs(fat_library, tool="cuobjdump") == list(CUDA_ARCHS)
    assert cuda_binaries.embedded_ptx_archs(fat_library, tool="cuobjdump") == ["sm_80"]
    assert not cuda_binaries.library_keeps_cuda_source(fat_library)


@needs_nvcc
def test_the_fatbin_parser_agrees_with_cuobjdump(fat_library: Path) -> None:
    assert cuda_binaries.embedded_cuda_archs(fat_library, tool="parser") == list(CUDA_ARCHS)
    assert cuda_binaries.embedded_ptx_archs(fat_library, tool="parser") == ["sm_80"]


@needs_nvcc
def test_export_refuses_a_fat_library_missing_an_sm(tmp_path: Path, fat_executable) -> None:
    spec = resolve_target(FAT_CUDA_ALL)
    wider = replace(spec, fat_archs=(*spec.fat_archs, "sm_88"))
    with pytest.raises(RuntimeError, match=r"embeds no sm_88 cubin"):
        cuda_build.export(fat_executable, tmp_path / "lib.so", wider)
    assert not (tmp_path / "lib.so").exists()


def _fat_entry(archs: list[str]):
    features = {"arch": "sm_80", "archs": archs, "ptx": "sm_80"}
    return entry(target="cuda:" + ",".join(archs), target_kind="cuda", features=features)


@pytest.mark.parametrize("gpu", ["sm_80", "sm_90", "sm_121", "sm_130"])
def test_a_fat_entry_fits_its_sms_and_newer_gpus_through_its_ptx(gpu: str) -> None:
    machine = replace(H200, features={"arch": gpu})
    assert why_not(_fat_entry(list(CUDA_ARCHS)), machine, "auto", "native") is None


def test_a_fat_entry_refuses_a_gpu_older_than_its_ptx() -> None:
    machine = replace(H200, features={"arch": "sm_75"})
    reason = why_not(_fat_entry(["sm_80", "sm_90a"]), machine, "auto", "native")
    assert reason == "built for sm_80, sm_90a (PTX sm_80), this GPU is sm_75"


def test_publish_describes_a_fat_target_by_its_sms() -> None:
    from vllm_tvm.cli.publish_cmd import target_features

    features = target_features("cuda:sm_90a,sm_80")
    assert json.loads(json.dumps(features)) == {
        "arch": "sm_80",
        "archs": ["sm_80", "sm_90a"],
        "ptx": "sm_80",
    }


@pytest.fixture(scope="module")
def fat_artifact(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama compiled for cuda:all in bf16 with `vllm-tvm compile` (once)."""
    from vllm_tvm.cli.main import main as cli_main

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    output = tmp_path_factory.mktemp("fat_cuda") / "artifact"
    arguments = ["compile", str(tiny_model_dir("llama")), "--target", FAT_CUDA_ALL]
    assert cli_main([*arguments, "--dtype", "bfloat16", "--output", str(output)]) == 0
    return output


@pytest.mark.slow
@needs_cuobjdump
def test_a_compiled_model_is_one_library_with_every_sms_cubin(fat_artifact: Path) -> None:
    manifest = json.loads((fat_artifact / "manifest.json").read_text())
    assert manifest["target"] == "cuda:" + ",".join(CUDA_ARCHS)
    library = fat_artifact / "model.so"
    assert cuda_binaries.embedded_cuda_archs(library, tool="cuobjdump") == list(CUDA_ARCHS)
    assert cuda_binaries.embedded_ptx_archs(library, tool="cuobjdump") == ["sm_80"]
