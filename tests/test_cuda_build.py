"""CUDA ahead-of-time builds on a machine without a GPU driver, and the target presets."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vllm_tvm.compiler import cuda_binaries, cuda_build
from vllm_tvm.compiler.targets import CUDA_ARCHS, resolve_target, supported_target_names

REPO_ROOT = Path(__file__).resolve().parent.parent

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
needs_no_driver = pytest.mark.skipif(
    cuda_build.real_cuda_driver_present(), reason="this machine has a real CUDA driver"
)

# A matmul and an elementwise op: the CUDA default pipeline schedules them with dlight's
# Matmul/GEMV/Reduction/GeneralReduction/Fallback rules (float32, so no tensor-core path).
MODULE_SOURCE = textwrap.dedent(
    """
    import tvm
    from tvm.script import relax as R

    @tvm.script.ir_module
    class MatmulSilu:
        @R.function
        def main(x: R.Tensor(("n", 64), "float32"), w: R.Tensor((64, 48), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.nn.silu(y)
                R.output(z)
            return z
    """
)


def _run_python(script: str, env: dict[str, str] | None = None) -> dict:
    """Run `script` in a fresh interpreter (it prints one JSON line last) and parse it."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def module_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # TVMScript needs the class's source in a real file.
    path = tmp_path_factory.mktemp("relax_src") / "matmul_silu_module.py"
    path.write_text(MODULE_SOURCE)
    return path


@pytest.fixture(scope="module")
def cuda_executable(module_file: Path):
    """The small Relax module built for cuda:sm_90a (once per module)."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc (CUDA toolkit)")
    sys.path.insert(0, str(module_file.parent))
    try:
        from matmul_silu_module import MatmulSilu
    finally:
        sys.path.remove(str(module_file.parent))
    return cuda_build.build_relax_module(MatmulSilu, resolve_target("cuda:sm_90a"))


@pytest.fixture(scope="module")
def cuda_library(tmp_path_factory: pytest.TempPathFactory, cuda_executable) -> Path:
    """`cuda_executable` exported for cuda:sm_90a."""
    path = tmp_path_factory.mktemp("cuda_lib") / "lib.so"
    return cuda_build.export(cuda_executable, path, resolve_target("cuda:sm_90a"))


@needs_nvcc
def test_cuda_library_embeds_an_sm90a_cubin(cuda_library: Path) -> None:
    assert cuda_binaries.embedded_cuda_archs(cuda_library) == ["sm_90a"]
    assert cuda_binaries.library_embeds_cuda_binary(cuda_library, "sm_90a")


@needs_nvcc
def test_cuda_library_keeps_no_cuda_source(cuda_library: Path) -> None:
    assert not cuda_binaries.library_keeps_cuda_source(cuda_library)


@needs_nvcc
@pytest.mark.skipif(cuda_binaries.find_cuobjdump() is None, reason="needs cuobjdump")
def test_cuobjdump_and_the_fatbin_parser_agree(cuda_library: Path) -> None:
    by_tool = cuda_binaries.embedded_cuda_archs(cuda_library, tool="cuobjdump")
    by_parser = cuda_binaries.embedded_cuda_archs(cuda_library, tool="parser")
    assert by_tool == by_parser == ["sm_90a"]


@needs_nvcc
def test_export_refuses_a_library_without_the_targets_cubin(
    tmp_path: Path, cuda_executable
) -> None:
    with pytest.raises(RuntimeError, match=r"embeds no sm_80 cubin; cubins found: sm_90a"):
        cuda_build.export(cuda_executable, tmp_path / "lib.so", resolve_target("cuda:sm_80"))
    assert not (tmp_path / "lib.so").exists()


@needs_nvcc
@needs_no_driver
def test_without_the_stub_tvm_keeps_source_and_export_refuses_it(
    tmp_path: Path, module_file: Path
) -> None:
    # The negative control: plain tvm.compile in a fresh process with no driver.
    script = textwrap.dedent(
        f"""
        import json, os, sys
        sys.path.insert(0, {str(module_file.parent)!r})
        os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
        import tvm
        from matmul_silu_module import MatmulSilu
        from vllm_tvm.compiler import cuda_build
        from vllm_tvm.compiler.targets import resolve_target
        spec = resolve_target("cuda")
        target = spec.make_target()
        with target:
            executable = tvm.compile(MatmulSilu, target=target)
        executable.export_library({str(tmp_path / "plain.so")!r})
        try:
            cuda_build.export(executable, {str(tmp_path / "checked.so")!r}, spec)
            refusal = None
        except RuntimeError as err:
            refusal = str(err)
        print(json.dumps({{"refusal": refusal}}))
        """
    )
    result = _run_python(script)
    plain = tmp_path / "plain.so"
    assert cuda_binaries.library_keeps_cuda_source(plain)
    assert not cuda_binaries.library_embeds_cuda_binary(plain)
    assert "keeps CUDA source" in result["refusal"]
    assert not (tmp_path / "checked.so").exists()


def _fake_real_driver(directory: Path) -> Path:
    """A libcuda.so.1 with the driver symbols TVM links and without our stub's marker."""
    import tvm

    runtime_cuda = (
        Path(tvm.base._LOADED_LIBS["tvm_runtime"]._name).parent / "libtvm_runtime_cuda.so"
    )
    symbols = cuda_build.driver_symbols(runtime_cuda)
    source = directory / "fake_driver.c"
    source.write_text("".join(f"int {name}(void) {{ return 0; }}\n" for name in symbols))
    lib = directory / "libcuda.so.1"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib), str(source)],
        check=True,
    )
    return lib


ENABLE_SCRIPT = textwrap.dedent(
    """
    import json
    from vllm_tvm.compiler import cuda_build
    how = cuda_build.enable_cuda_codegen()
    maps = open("/proc/self/maps").read()
    drivers = sorted({line.split()[-1] for line in maps.splitlines()
                      if line.endswith("libcuda.so.1")})
    print(json.dumps({"how": how, "drivers": drivers}))
    """
)


@needs_no_driver
def test_enable_cuda_codegen_loads_the_stub_when_no_driver_exists() -> None:
    result = _run_python(ENABLE_SCRIPT)
    assert result["how"] == "stub"
    assert len(result["drivers"]) == 1
    assert "libcuda_stub" in result["drivers"][0]


@needs_no_driver
def test_a_real_driver_is_used_and_the_stub_never_loaded(tmp_path: Path) -> None:
    driver = _fake_real_driver(tmp_path)
    result = _run_python(ENABLE_SCRIPT, env={"LD_LIBRARY_PATH": str(tmp_path)})
    # "loaded": import tvm already found the driver; "driver": enable_cuda_codegen did.
    assert result["how"] in ("loaded", "driver")
    assert result["drivers"] == [str(driver)]


def test_stub_driver_answers_no_device(tmp_path: Path) -> None:
    stub = ctypes.CDLL(str(cuda_build.build_libcuda_stub(tmp_path)))
    assert stub.cuModuleLoadData() == 100  # CUDA_ERROR_NO_DEVICE in cuda.h
    assert hasattr(stub, cuda_build.STUB_MARKER)


def test_cuda_alias_means_sm90a() -> None:
    spec = resolve_target("cuda")
    assert (spec.name, spec.kind, spec.arch, spec.device) == (
        "cuda:sm_90a",
        "cuda",
        "sm_90a",
        "cuda",
    )


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120a"])
def test_explicit_cuda_arch_reaches_the_tvm_target(arch: str) -> None:
    assert arch in CUDA_ARCHS
    target = resolve_target(f"cuda:{arch}").make_target()
    assert target.kind.name == "cuda"
    assert str(target.attrs["arch"]) == arch
    assert int(target.attrs["max_shared_memory_per_block"]) == 49152
    assert target.host.kind.name == "llvm"


def test_llvm_is_the_host_cpu_target() -> None:
    spec = resolve_target("llvm")
    assert (spec.kind, spec.arch, spec.device, spec.build_only) == ("llvm", None, "cpu", False)
    assert spec.make_target().kind.name == "llvm"


@pytest.mark.parametrize("name", ["rocm", "metal", "webgpu"])
def test_gpu_kinds_without_a_runtime_are_build_only(name: str) -> None:
    spec = resolve_target(name)
    assert spec.build_only
    assert spec.make_target().kind.name == spec.kind


def test_bad_target_name_is_refused_by_name() -> None:
    with pytest.raises(ValueError) as err:
        resolve_target("cuda:sm_75")
    message = str(err.value)
    assert "'cuda:sm_75'" in message
    for name in supported_target_names():
        assert name in message


def test_vulkan_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"'vulkan'.*SPIR-V.*supported: .*cuda:sm_90a"):
        resolve_target("vulkan")
