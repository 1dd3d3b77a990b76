"""The cuda lane of `vllm-tvm embed` / `release-archive` / `validate-release`, built here
(nvcc, no GPU) from the tiny Llama compiled once for sm_90a.

Specification (README "Release archives"): a cuda bundle carries TVM's CUDA runtime
(libtvm_runtime_cuda.so) and the libcudart.so.13 it needs, and never the NVIDIA driver's
libcuda.so.1, which it expects from the machine; its CLI answers --help and --version without
a driver and names the missing driver when asked to run the model; the validator accepts the
archive as made, names the greedy-ids smoke it skips without a GPU (and runs it where one
answers), and refuses an archive that bundles libcuda or lacks the CUDA runtime.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from release_forgery import forge, record_files

from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.compiler.cuda_build import build_libcuda_stub
from vllm_tvm.native_bundle.bundle import write_embedding_bundle
from vllm_tvm.native_bundle.release_archive import ReleaseArchive, write_release_archive
from vllm_tvm.native_bundle.release_check import validate_archive

pytestmark = pytest.mark.slow  # a CUDA compile of the model (nvcc)
PROMPT = ["--prompt", "Once upon a time", "--max-tokens", "4", "--json"]


def _gpu_answers() -> bool:
    """Whether an NVIDIA GPU is here (asked of nvidia-smi, not of the validator's probe)."""
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def cuda_bundle(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    dest = tmp_path_factory.mktemp("embed_cuda") / "bundle"
    return write_embedding_bundle(dest, tiny_model_dir("llama"), target="cuda").path


@pytest.fixture(scope="module")
def release(cuda_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> ReleaseArchive:
    return write_release_archive(cuda_bundle, tmp_path_factory.mktemp("release_cuda"))


def _needed(library: Path) -> list[str]:
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True)
    return re.findall(r"Shared library: \[([^\]]+)\]", dynamic.stdout)


def test_a_cuda_bundle_carries_the_cuda_runtime_but_not_the_driver(cuda_bundle: Path) -> None:
    libraries = sorted(p.name for p in (cuda_bundle / "lib").iterdir())
    assert {"libtvm_runtime_cuda.so", "libcudart.so.13", "libvllm_tvm.so"} <= set(libraries)
    assert not [name for name in libraries if name.startswith("libcuda.so")]
    assert {"libcudart.so.13", "libcuda.so.1"} <= set(
        _needed(cuda_bundle / "lib" / "libtvm_runtime_cuda.so")
    )
    manifest = json.loads((cuda_bundle / "model" / "manifest.json").read_text())
    assert (manifest["target_kind"], manifest["target"]) == ("cuda", "cuda:sm_90a")


def test_the_cli_needs_no_driver_for_help_and_names_it_for_the_model(cuda_bundle: Path) -> None:
    cli = str(cuda_bundle / "bin" / "vllm-tvm-cli")
    assert subprocess.run([cli, "--version"], capture_output=True).returncode == 0
    if _gpu_answers():
        pytest.skip("an NVIDIA driver is here: the model runs (see the greedy-ids test)")
    done = subprocess.run([cli, *PROMPT], capture_output=True, text=True)
    assert done.returncode != 0
    assert "libcuda.so.1" in done.stderr


def test_with_a_driver_library_the_bundled_cuda_runtime_loads(cuda_bundle: Path) -> None:
    """With a (stub) libcuda.so.1 on the loader's path, the bundle's own libtvm_runtime_cuda.so
    and libcudart.so.13 load and the run gets as far as asking the driver for memory."""
    if _gpu_answers():
        pytest.skip("an NVIDIA driver is here: the model runs (see the greedy-ids test)")
    env = {**os.environ, "LD_LIBRARY_PATH": str(build_libcuda_stub().parent)}
    cli = str(cuda_bundle / "bin" / "vllm-tvm-cli")
    done = subprocess.run([cli, *PROMPT], capture_output=True, text=True, env=env)
    assert done.returncode != 0
    assert "CUDA Runtime Error" in done.stderr and "libcuda.so.1" not in done.stderr


def test_the_cuda_archive_validates_and_names_the_smoke_it_skips(release, capsys) -> None:
    assert release.archive.name.endswith("-linux-x86_64-cuda.tar.gz")
    report = validate_archive(release.archive)
    assert report.problems == []
    assert cli_main(["validate-release", str(release.archive)]) == 0
    out = capsys.readouterr().out
    if _gpu_answers():
        assert report.skipped == [] and "skipped" not in out
    else:
        assert [s.split(":")[0] for s in report.skipped] == ["greedy-ids smoke"]
        assert "libcuda.so.1" in report.skipped[0]
        assert f"{release.archive.name}: skipped greedy-ids smoke" in out


def test_the_sbom_names_the_cuda_runtime_and_its_license(release, tmp_path) -> None:
    def check(root: Path) -> None:
        sbom = json.loads((root / "sbom.spdx.json").read_text())
        packages = {p["name"]: p for p in sbom["packages"]}
        cudart = packages["nvidia-cuda-runtime"]
        assert cudart["licenseDeclared"] == "LicenseRef-NVIDIA-CUDA-EULA"
        ids = {f["fileName"]: f["SPDXID"] for f in sbom["files"]}
        assert cudart["hasFiles"] == [ids["./lib/libcudart.so.13"]]
        assert ids["./lib/libtvm_runtime_cuda.so"] in packages["apache-tvm-runtime"]["hasFiles"]
        licenses = [info["licenseId"] for info in sbom["hasExtractedLicensingInfos"]]
        assert licenses == ["LicenseRef-NVIDIA-CUDA-EULA"]
        assert (root / "licenses" / "nvidia-cuda-runtime.LICENSE").is_file()

    forge(release, tmp_path, check)


def test_a_bundled_driver_library_is_refused(release, tmp_path) -> None:
    stub = build_libcuda_stub().read_bytes()
    archive = forge(release, tmp_path, lambda root: record_files(root, {"lib/libcuda.so.1": stub}))
    problems = validate_archive(archive).problems
    assert any("lib/libcuda.so.1 is the NVIDIA driver's library" in p for p in problems), problems


@pytest.mark.parametrize("library", ["lib/libcudart.so.13", "lib/libtvm_runtime_cuda.so"])
def test_a_cuda_archive_without_its_cuda_runtime_is_refused(release, tmp_path, library) -> None:
    archive = forge(release, tmp_path, lambda root: record_files(root, {}, (library,)))
    problems = validate_archive(archive).problems
    assert f"a cuda archive must carry {library}" in problems, problems


def test_where_a_gpu_answers_the_greedy_ids_are_run(release) -> None:
    if not _gpu_answers():
        pytest.skip("needs an NVIDIA GPU and driver")
    name = release.archive.name.removesuffix(".tar.gz")
    smoke = {}

    def read(root: Path) -> None:
        smoke.update(json.loads((root / "manifest.json").read_text())["smoke"])

    forge(release, release.archive.parent / "read", read)
    assert smoke["token_ids"], f"{name} recorded no greedy ids on a GPU machine"
    assert validate_archive(release.archive).skipped == []
