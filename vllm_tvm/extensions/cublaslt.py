"""Build and load the cuBLASLt GEMM extension (`cublaslt_gemm.cc`).

Building needs only a C++ compiler and tvm-ffi's headers (no CUDA or cuBLAS headers), so any
machine that compiles CUDA artifacts builds it. Loading needs libcublasLt on the serving
machine: `VLLM_TVM_CUBLASLT_PATH`, then the system loader's search path, then the NVIDIA
wheels (`nvidia-cublas`) in the running Python, then `/usr/local/cuda`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

EXTENSION_NAME = "cublaslt_gemm.so"
LIBRARY_PATH_ENV = "VLLM_TVM_CUBLASLT_PATH"
WORKSPACE_BYTES = 32 << 20
"""cuBLASLt's scratch space per device; its heuristics ask for at most a few MiB on Hopper."""
_SOURCE = Path(__file__).with_name("cublaslt_gemm.cc")
_INIT_FUNCTION = "vllm_tvm.cublaslt.init"
_SONAMES = ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so")
_loaded: dict[str, Any] = {}


class CuBLASLtError(RuntimeError):
    """The cuBLASLt extension could not be built or loaded."""


def build_cublaslt_extension(output: Path) -> Path:
    """Compile the extension into `output` with `$CXX` (default g++) against tvm-ffi."""
    import tvm_ffi.libinfo

    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        raise CuBLASLtError(
            f"building the cuBLASLt extension needs a C++ compiler; '{compiler}' was not found "
            "(set CXX, or compile with --gemm tir)"
        )
    include = Path(tvm_ffi.libinfo.find_include_path())
    library_dir = Path(tvm_ffi.libinfo.find_libtvm_ffi()).parent
    command = [
        compiler, "-std=c++17", "-O2", "-fPIC", "-shared",
        f"-I{include}", f"-I{include / 'dlpack'}",
        str(_SOURCE), f"-L{library_dir}", "-ltvm_ffi", "-ldl", "-o", str(output),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CuBLASLtError(f"building the cuBLASLt extension failed:\n{result.stderr}")
    return output


def _candidates() -> list[str]:
    """Places to look for libcublasLt, most explicit first."""
    found = [os.environ[LIBRARY_PATH_ENV]] if os.environ.get(LIBRARY_PATH_ENV) else []
    found += list(_SONAMES)
    for site in sys.path:
        nvidia = Path(site) / "nvidia"
        if nvidia.is_dir():
            found += [str(path) for path in sorted(nvidia.glob("*/lib/libcublasLt.so*"))]
    found += [str(Path("/usr/local/cuda/lib64") / soname) for soname in _SONAMES]
    return found


def find_cublaslt() -> str:
    """The first loadable libcublasLt; raises CuBLASLtError naming every place tried."""
    tried = []
    for candidate in _candidates():
        try:
            ctypes.CDLL(candidate, mode=ctypes.RTLD_LOCAL)
        except OSError as err:
            tried.append(f"{candidate} ({err})")
            continue
        return candidate
    raise CuBLASLtError(
        "this artifact runs its matmuls through cuBLASLt, but no libcublasLt could be loaded; "
        f"set {LIBRARY_PATH_ENV}, install nvidia-cublas, or compile with --gemm tir. "
        "Tried: " + "; ".join(tried)
    )


def load_cublaslt_extension(path: Path, device: Any) -> None:
    """Load the extension at `path` and initialise it for the TVM CUDA `device`."""
    import tvm
    import tvm_ffi

    # The extension registers global function names, which exist once per process: the first
    # artifact's copy serves every later artifact (all are built from the same source).
    if tvm_ffi.get_global_func(_INIT_FUNCTION, allow_missing=True) is None:
        _loaded[str(path)] = ctypes.CDLL(str(Path(path).resolve()), mode=ctypes.RTLD_LOCAL)
    workspace = tvm.runtime.empty((WORKSPACE_BYTES,), "uint8", device)
    tvm_ffi.get_global_func(_INIT_FUNCTION)(find_cublaslt(), workspace)
