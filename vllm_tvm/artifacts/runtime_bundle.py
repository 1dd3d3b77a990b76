"""A runtime-only TVM for GPU serving boxes, as a plain site directory.

Why this exists: the apache-tvm wheel is 100 MB, almost all of it the compiler (LLVM inside
``libtvm_compiler.so``), CUTLASS headers and sources that a box which only *loads* compiled
models never uses. This module cuts the wheel down to its Python package and runtime libraries
(about 23 MB together with apache-tvm-ffi) for a chosen Python version, so it can ship next to
the compiled artifacts and be used with ``PYTHONPATH=<bundle>``. With ``libtvm_compiler.so``
absent TVM starts in runtime-only mode;
``vllm_tvm.runtime.tvm_runtime.load_runtime_only`` then loads the CUDA and extra
runtime libraries. The box itself still needs numpy, ml_dtypes and typing_extensions (the
wheels' own requirements), and libcudart.so.13 for CUDA.

By default the bundle matches the installed apache-tvm / apache-tvm-ffi versions, because the
runtime must be the one the artifacts were compiled with.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from vllm_tvm.artifacts.cache import cache_root

MANIFEST_NAME = "VLLM_TVM_RUNTIME_BUNDLE.json"
RUNTIME_REQUIREMENTS = ("numpy", "ml_dtypes", "typing_extensions")

# Paths inside each wheel that a runtime never needs. tvm_ffi's lib/libtvm_ffi_testing.so stays:
# tvm_ffi's core extension links it.
_TVM_EXCLUDED = (
    "tvm/lib/libtvm_compiler.so",
    "tvm/3rdparty/",
    "tvm/include/",
    "tvm/src/",
    "tvm/web/",
    "tvm/lib64/",
    "tvm/cmake/",
)
_FFI_EXCLUDED = ("tvm_ffi/3rdparty/", "tvm_ffi/include/", "tvm_ffi/src/")
_PLATFORMS = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_24", "manylinux_2_17")


@dataclass(frozen=True)
class RuntimeBundle:
    """A built bundle: put ``path`` on PYTHONPATH of a ``python_version`` interpreter."""

    path: Path
    python_version: str
    tvm_version: str
    ffi_version: str
    size_bytes: int


def _python_tag(python_version: str) -> str:
    parts = python_version.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"python_version must look like '3.12', got {python_version!r}")
    return f"cp{parts[0]}{parts[1]}"


def _cached(cache: Path, pattern: str) -> Path | None:
    found = sorted(cache.glob(pattern))
    return found[-1] if found else None


def fetch_wheel(
    project: str, version: str, python_version: str, cache_dir: Path, machine: str
) -> Path:
    """Path of ``project==version`` for ``python_version`` on Linux ``machine``, downloaded
    with ``pip download --no-deps`` into ``cache_dir`` unless already there."""
    stem = project.replace("-", "_")
    tag = _python_tag(python_version)
    patterns = [
        f"{stem}-{version}-{tag}-{tag}-*{machine}.whl",
        f"{stem}-{version}-py3-none-*{machine}.whl",
    ]
    for pattern in patterns:
        if wheel := _cached(cache_dir, pattern):
            return wheel
    cache_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", python_version, "--implementation", "cp", "-d", str(cache_dir)]
    for plat in _PLATFORMS:
        cmd += ["--platform", f"{plat}_{machine}"]
    done = subprocess.run([*cmd, f"{project}=={version}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"pip download of {project}=={version} for Python {python_version} ({machine}) "
            f"failed:\n{done.stderr.strip()}"
        )
    for pattern in patterns:
        if wheel := _cached(cache_dir, pattern):
            return wheel
    raise RuntimeError(f"pip download put no {project}=={version} wheel for {tag} in {cache_dir}")


def _extract(wheel: Path, package: str, excluded: tuple[str, ...], dest: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            if not name.startswith(f"{package}/") or name.startswith(excluded):
                continue
            if "__pycache__" in name.split("/"):
                continue
            target = Path(archive.extract(info, dest))
            mode = info.external_attr >> 16
            if mode and not info.is_dir():
                target.chmod(mode & 0o777)


def _tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build_runtime_bundle(
    dest: str | Path,
    python_version: str = "3.12",
    *,
    cache_dir: Path | None = None,
    tvm_version: str | None = None,
    ffi_version: str | None = None,
    machine: str | None = None,
) -> RuntimeBundle:
    """Build the runtime-only site directory at ``dest`` from the two wheels.

    Wheels come from ``cache_dir`` (default ``cache_root()/wheels``) or ``pip download``.
    ``tvm_version``/``ffi_version`` default to the installed apache-tvm / apache-tvm-ffi,
    ``machine`` to this one's (``x86_64``, ``aarch64``). ``dest`` must be absent, empty, or a
    bundle built earlier (then it is replaced); the new tree is built beside it and swapped in.
    """
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()) and not (dest / MANIFEST_NAME).is_file():
        raise FileExistsError(f"refusing to replace {dest}: not empty and not a runtime bundle")
    tvm_version = tvm_version or metadata.version("apache-tvm")
    ffi_version = ffi_version or metadata.version("apache-tvm-ffi")
    machine = machine or platform.machine()
    cache = cache_dir or cache_root() / "wheels"
    tvm_wheel = fetch_wheel("apache-tvm", tvm_version, python_version, cache, machine)
    ffi_wheel = fetch_wheel("apache-tvm-ffi", ffi_version, python_version, cache, machine)

    staging = dest.with_name(f".{dest.name}.{os.getpid()}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        _extract(tvm_wheel, "tvm", _TVM_EXCLUDED, staging)
        _extract(ffi_wheel, "tvm_ffi", _FFI_EXCLUDED, staging)
        manifest = {
            "python_version": python_version,
            "apache-tvm": tvm_version,
            "apache-tvm-ffi": ffi_version,
            "machine": machine,
            "requires": list(RUNTIME_REQUIREMENTS),
        }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RuntimeBundle(dest, python_version, tvm_version, ffi_version, _tree_size(dest))
