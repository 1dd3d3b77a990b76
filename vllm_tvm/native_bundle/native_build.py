"""Builds libvllm_tvm, bin/vllm-tvm-cli and vllm-tvm-tokenize from native/ with the system C++
compiler and CMake.

Why a cached build: the C++ library is compiled against the headers and runtime libraries of
the installed apache-tvm-ffi / apache-tvm wheels (a runtime other than the one the artifacts
were compiled with must not be mixed in), and a build takes about a minute on a small
machine; one build directory per (sources, TVM version, machine, sanitizer) is reused: the
library of a CUDA bundle is this machine's, it only bundles TVM's CUDA runtime beside it.

For another machine (aarch64) the TVM runtime libraries are those of the same apache-tvm /
apache-tvm-ffi versions' wheels for that machine, and libvllm_tvm is cross-compiled against
them (the headers are the same on every machine).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from vllm_tvm.artifacts.cache import cache_root
from vllm_tvm.artifacts.runtime_bundle import fetch_wheel
from vllm_tvm.native_bundle.targets import BUILT_TARGETS, HOST_TARGET, EmbedTarget

REPO_ROOT = Path(__file__).resolve().parents[2]
NATIVE_DIR = REPO_ROOT / "native"
HEADER = REPO_ROOT / "include" / "vllm_tvm.h"
BUILD_JOBS = "2"
"""Parallel compile jobs: the library builds on small shared machines too."""


@dataclass(frozen=True)
class NativeBuild:
    """One finished build: the libraries, the CLI and the tokenizer tool, and the TVM runtime
    libraries a bundle carries beside them (bundled_libraries)."""

    build_dir: Path
    shared_library: Path
    static_library: Path
    cli: Path
    tokenize_tool: Path
    runtime_libraries: tuple[Path, ...]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the Python package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _versions() -> tuple[str, str]:
    return metadata.version("apache-tvm"), metadata.version("apache-tvm-ffi")


def tvm_runtime_libraries(target: EmbedTarget) -> tuple[Path, ...]:
    """libtvm_runtime.so and libtvm_ffi.so for `target`'s machine (what libvllm_tvm links)."""
    members = ("tvm/lib/libtvm_runtime.so", "tvm_ffi/lib/libtvm_ffi.so")
    if target.machine is None:
        return (
            _package_dir("tvm").parent / members[0],
            _package_dir("tvm_ffi").parent / members[1],
        )
    tvm_version, ffi_version = _versions()
    dest = cache_root() / "native" / f"runtime-{target.machine}-{tvm_version}-{ffi_version}"
    libraries = tuple(dest / Path(member).name for member in members)
    if all(library.is_file() for library in libraries):
        return libraries
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheels = cache_root() / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    for project, version, member in (
        ("apache-tvm", tvm_version, members[0]),
        ("apache-tvm-ffi", ffi_version, members[1]),
    ):
        wheel = fetch_wheel(project, version, python, wheels, target.machine)
        with zipfile.ZipFile(wheel) as archive:
            (dest / Path(member).name).write_bytes(archive.read(member))
    return libraries


CUDART_SONAME = "libcudart.so.13"
"""The CUDA runtime libtvm_runtime_cuda.so needs (NEEDED), bundled beside it."""


def cuda_runtime_library() -> Path:
    """libcudart.so.13 to bundle: the `nvidia-cuda-runtime` wheel's (the `cuda` extra), else
    the toolkit's (`$CUDA_HOME`, `/usr/local/cuda`)."""
    candidates = [
        p for site in sys.path for p in sorted(Path(site).glob(f"nvidia/*/lib/{CUDART_SONAME}"))
    ]
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            candidates.append(Path(root) / "lib64" / CUDART_SONAME)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise RuntimeError(
        f"a cuda bundle carries {CUDART_SONAME}: install the `cuda` extra (nvidia-cuda-runtime) "
        "or the CUDA 13 toolkit (CUDA_HOME)"
    )


def bundled_libraries(target: EmbedTarget) -> tuple[Path, ...]:
    """The runtime libraries a bundle for `target` carries in lib/ beside libvllm_tvm: TVM's
    runtime, and for CUDA TVM's CUDA runtime and libcudart (libvllm_tvm loads both only for a
    CUDA model)."""
    libraries = tvm_runtime_libraries(target)
    if not target.cuda_runtime:
        return libraries
    return (
        *libraries,
        _package_dir("tvm") / "lib" / "libtvm_runtime_cuda.so",
        cuda_runtime_library(),
    )


def _require_tools(target: EmbedTarget) -> None:
    tools = ["cmake", target.c_compiler or "cc", target.cxx_compiler or "c++"]
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        flag = "" if target.machine is None else f" --{target.machine}"
        raise RuntimeError(
            f"building libvllm_tvm needs {', '.join(missing)} on PATH; install them with "
            f"scripts/install_native_toolchain.sh{flag}"
        )
    if not NATIVE_DIR.is_dir() or not HEADER.is_file():
        raise RuntimeError(f"the C sources are missing: expected {NATIVE_DIR} and {HEADER}")


def _source_key(target: EmbedTarget, sanitize: str | None) -> str:
    from vllm_tvm import __version__

    digest = hashlib.sha256()
    for path in sorted([HEADER, *NATIVE_DIR.rglob("*")]):
        if path.is_file():
            digest.update(str(path.relative_to(REPO_ROOT)).encode())
            digest.update(path.read_bytes())
    for part in _versions():
        digest.update(part.encode())
    machine = f"{target.machine}|{target.c_compiler}|{target.cxx_compiler}"
    digest.update(f"{__version__}|{machine}|{sanitize or ''}".encode())
    return digest.hexdigest()[:24]


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} ... failed:\n{done.stdout}\n{done.stderr}")


def build_native(
    target: EmbedTarget = BUILT_TARGETS[HOST_TARGET], sanitize: str | None = None
) -> NativeBuild:
    """The build of native/ for `target` (`sanitize`: a -fsanitize= value such as "address")."""
    from vllm_tvm import __version__

    _require_tools(target)
    runtime_libraries = tvm_runtime_libraries(target)
    build_dir = cache_root() / "native" / _source_key(target, sanitize)
    build = NativeBuild(
        build_dir=build_dir,
        shared_library=build_dir / "libvllm_tvm.so",
        static_library=build_dir / "libvllm_tvm.a",
        cli=build_dir / "vllm-tvm-cli",
        tokenize_tool=build_dir / "vllm-tvm-tokenize",
        runtime_libraries=bundled_libraries(target),
    )
    outputs = (build.cli, build.tokenize_tool, build.shared_library, build.static_library)
    if all(output.is_file() for output in outputs):
        return build
    include_dirs = [_package_dir("tvm_ffi") / "include"]
    configure = ["cmake", "-S", str(NATIVE_DIR), "-B", str(build_dir)]
    configure += ["-DCMAKE_BUILD_TYPE=RelWithDebInfo" if sanitize else "-DCMAKE_BUILD_TYPE=Release"]
    configure += [f"-DTVM_INCLUDE_DIRS={';'.join(map(str, include_dirs))}"]
    configure += [f"-DTVM_LIBRARY_DIRS={';'.join(str(p.parent) for p in runtime_libraries)}"]
    configure += [f"-DVLLM_TVM_VERSION={__version__}", f"-DVLLM_TVM_SANITIZE={sanitize or ''}"]
    if target.machine is not None:
        configure += ["-DCMAKE_SYSTEM_NAME=Linux", f"-DCMAKE_SYSTEM_PROCESSOR={target.machine}"]
        configure += [f"-DCMAKE_C_COMPILER={target.c_compiler}"]
        configure += [f"-DCMAKE_CXX_COMPILER={target.cxx_compiler}"]
    _run(configure)
    _run(["cmake", "--build", str(build_dir), "-j", BUILD_JOBS])
    return build
