"""The runtime-only TVM bundle, and running a compiled Relax VM library with it alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import typing_extensions

from vllm_tvm.artifacts.runtime_bundle import MANIFEST_NAME, RuntimeBundle, build_runtime_bundle
from vllm_tvm.compiler import cuda_build
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.runtime.tvm_runtime import load_runtime_only

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> RuntimeBundle:
    """A bundle for this interpreter's Python. Wheels are immutable per version, so they are
    kept across runs (conftest points VLLM_TVM_CACHE_DIR at a per-run directory)."""
    wheels = os.environ.get("VLLM_TVM_TEST_WHEEL_CACHE") or Path.home() / ".cache/vllm_tvm/wheels"
    dest = tmp_path_factory.mktemp("bundle") / "site"
    return build_runtime_bundle(dest, LOCAL_PYTHON, cache_dir=Path(wheels))


@pytest.fixture(scope="module")
def llvm_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Relax VM library, y = silu(x @ w) with a dynamic row count, built for llvm."""
    import tvm
    from tvm import relax

    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 8], "float32"))
    w = relax.Var("w", relax.TensorType([8, 3], "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x, w]):
        with builder.dataflow():
            out = builder.emit_output(relax.op.nn.silu(relax.op.matmul(x, w)))
        builder.emit_func_output(out)
    spec = resolve_target("llvm")
    executable = cuda_build.build_relax_module(builder.get(), spec)
    return cuda_build.export(executable, tmp_path_factory.mktemp("llvm_lib") / "lib.so", spec)


def _deps_dir(root: Path) -> Path:
    """Only the bundle's declared requirements, linked from this environment."""
    deps = root / "deps"
    deps.mkdir()
    site = Path(np.__file__).parent.parent
    for module in (np, ml_dtypes):
        (deps / Path(module.__file__).parent.name).symlink_to(Path(module.__file__).parent)
    if (site / "numpy.libs").is_dir():
        (deps / "numpy.libs").symlink_to(site / "numpy.libs")
    (deps / "typing_extensions.py").symlink_to(typing_extensions.__file__)
    return deps


CHILD = textwrap.dedent(
    """
    import json, sys
    bundle, deps, repo, library, work = sys.argv[1:6]
    sys.path[:0] = [bundle, deps, repo]
    import numpy as np
    from vllm_tvm.runtime.tvm_runtime import load_runtime_only
    info = load_runtime_only()
    tvm = info.tvm
    try:
        import tvm.relax
        relax_error = None
    except Exception as err:
        relax_error = type(err).__name__
    dev = tvm.cpu()
    vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(library), dev)
    x, w = np.load(work + "/x.npy"), np.load(work + "/w.npy")
    out = vm["main"](tvm.runtime.tensor(x, dev), tvm.runtime.tensor(w, dev)).numpy()
    np.save(work + "/out.npy", out)
    report = {"tvm_path": str(info.tvm_path), "runtime_only": info.runtime_only,
              "extra": info.extra, "relax_error": relax_error}
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def child_run(
    bundle: RuntimeBundle, llvm_library: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict, Path]:
    """Run the llvm library in `python -S` whose sys.path holds the bundle, the bundle's
    requirements and this repo, nothing else: the venv's full TVM is not importable."""
    work = tmp_path_factory.mktemp("child")
    rng = np.random.default_rng(7)
    np.save(work / "x.npy", rng.standard_normal((5, 8)).astype("float32"))
    np.save(work / "w.npy", rng.standard_normal((8, 3)).astype("float32"))
    args = [bundle.path, _deps_dir(work), REPO_ROOT, llvm_library, work]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TVM_USE_RUNTIME_LIB")}
    done = subprocess.run(
        [sys.executable, "-S", "-c", CHILD, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), work


def test_bundle_leaves_out_the_compiler(bundle: RuntimeBundle) -> None:
    assert not (bundle.path / "tvm/lib/libtvm_compiler.so").exists()
    for folder in ("3rdparty", "include", "src", "web"):
        assert not (bundle.path / "tvm" / folder).exists(), folder


def test_bundle_keeps_the_runtime_libraries(bundle: RuntimeBundle) -> None:
    for lib in ("libtvm_runtime.so", "libtvm_runtime_cuda.so", "libtvm_runtime_extra.so"):
        assert (bundle.path / "tvm/lib" / lib).is_file(), lib
    # tvm_ffi's core extension links its testing library.
    assert (bundle.path / "tvm_ffi/lib/libtvm_ffi_testing.so").is_file()
    assert list(bundle.path.glob(f"tvm_ffi/core.cpython-{LOCAL_PYTHON.replace('.', '')}-*.so"))


def test_bundle_records_its_versions(bundle: RuntimeBundle) -> None:
    from importlib import metadata

    manifest = json.loads((bundle.path / MANIFEST_NAME).read_text())
    assert manifest["python_version"] == LOCAL_PYTHON
    assert manifest["apache-tvm"] == metadata.version("apache-tvm")
    assert manifest["apache-tvm-ffi"] == metadata.version("apache-tvm-ffi")


def test_child_imports_tvm_from_the_bundle_in_runtime_only_mode(
    child_run: tuple[dict, Path], bundle: RuntimeBundle
) -> None:
    report, _ = child_run
    assert Path(report["tvm_path"]) == (bundle.path / "tvm").resolve()
    assert report["runtime_only"] is True
    assert report["extra"] is True
    assert report["relax_error"] is not None  # the compiler is really absent


def test_runtime_only_child_runs_the_llvm_module_like_numpy(child_run: tuple[dict, Path]) -> None:
    _, work = child_run
    x = np.load(work / "x.npy").astype(np.float64)
    w = np.load(work / "w.npy").astype(np.float64)
    y = x @ w
    expected = y / (1.0 + np.exp(-y))  # silu
    np.testing.assert_allclose(np.load(work / "out.npy"), expected, rtol=1e-5, atol=1e-5)


def test_load_runtime_only_binds_the_disco_api_in_a_full_install() -> None:
    info = load_runtime_only()
    from tvm.runtime.disco import _ffi_api

    assert info.extra
    assert callable(_ffi_api.SessionThreaded)


def test_bundle_refuses_to_replace_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match=str(tmp_path)):
        build_runtime_bundle(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_malformed_python_version_is_refused_by_value(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'312'"):
        build_runtime_bundle(tmp_path / "site", "312", cache_dir=tmp_path / "wheels")
