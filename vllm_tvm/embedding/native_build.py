"""Builds libvllm_tvm and bin/vllm-tvm-cli from native/ with the system C++ compiler and CMake.

Why a cached build: the C++ library is compiled against the headers and runtime libraries of
the installed apache-tvm-ffi / apache-tvm wheels (a runtime other than the one the artifacts
were compiled with must not be mixed in), and a build takes about a minute on a small
machine; one build directory per (sources, TVM version, sanitizer) is reused.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from vllm_tvm.artifacts.cache import cache_root

REPO_ROOT = Path(__file__).resolve().parents[2]
NATIVE_DIR = REPO_ROOT / "native"
HEADER = REPO_ROOT / "include" / "vllm_tvm.h"
BUILD_JOBS = "2"
"""Parallel compile jobs: the library builds on small shared machines too."""


@dataclass(frozen=True)
class NativeBuild:
    """One finished build: the libraries and the CLI, and the TVM runtime they link."""

    build_dir: Path
    shared_library: Path
    static_library: Path
    cli: Path
    tvm_runtime_libraries: tuple[Path, ...]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the Python package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def tvm_runtime_libraries() -> tuple[Path, ...]:
    """The wheel's libtvm_runtime.so and libtvm_ffi.so (what libvllm_tvm links)."""
    return (
        _package_dir("tvm") / "lib" / "libtvm_runtime.so",
        _package_dir("tvm_ffi") / "lib" / "libtvm_ffi.so",
    )


def _require_tools() -> None:
    missing = [tool for tool in ("cmake", "c++", "cc") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(
            f"building libvllm_tvm needs {', '.join(missing)} on PATH; install them with "
            "scripts/install_native_toolchain.sh"
        )
    if not NATIVE_DIR.is_dir() or not HEADER.is_file():
        raise RuntimeError(f"the C sources are missing: expected {NATIVE_DIR} and {HEADER}")


def _source_key(sanitize: str | None) -> str:
    from vllm_tvm import __version__

    digest = hashlib.sha256()
    for path in sorted([HEADER, *NATIVE_DIR.rglob("*")]):
        if path.is_file():
            digest.update(str(path.relative_to(REPO_ROOT)).encode())
            digest.update(path.read_bytes())
    for part in (metadata.version("apache-tvm"), metadata.version("apache-tvm-ffi")):
        digest.update(part.encode())
    digest.update(f"{__version__}|{sanitize or ''}".encode())
    return digest.hexdigest()[:24]


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} ... failed:\n{done.stdout}\n{done.stderr}")


def build_native(sanitize: str | None = None) -> NativeBuild:
    """The host build of native/ (`sanitize`: a -fsanitize= value such as "address")."""
    from vllm_tvm import __version__

    _require_tools()
    runtime_libraries = tvm_runtime_libraries()
    build_dir = cache_root() / "native" / _source_key(sanitize)
    build = NativeBuild(
        build_dir=build_dir,
        shared_library=build_dir / "libvllm_tvm.so",
        static_library=build_dir / "libvllm_tvm.a",
        cli=build_dir / "vllm-tvm-cli",
        tvm_runtime_libraries=runtime_libraries,
    )
    if build.cli.is_file() and build.shared_library.is_file() and build.static_library.is_file():
        return build
    include_dirs = [_package_dir("tvm_ffi") / "include"]
    configure = ["cmake", "-S", str(NATIVE_DIR), "-B", str(build_dir)]
    configure += ["-DCMAKE_BUILD_TYPE=RelWithDebInfo" if sanitize else "-DCMAKE_BUILD_TYPE=Release"]
    configure += [f"-DTVM_INCLUDE_DIRS={';'.join(map(str, include_dirs))}"]
    configure += [f"-DTVM_LIBRARY_DIRS={';'.join(str(p.parent) for p in runtime_libraries)}"]
    configure += [f"-DVLLM_TVM_VERSION={__version__}", f"-DVLLM_TVM_SANITIZE={sanitize or ''}"]
    _run(configure)
    _run(["cmake", "--build", str(build_dir), "-j", BUILD_JOBS])
    return build
