"""Load TVM's runtime so compiled Relax VM libraries can run, with or without the compiler.

Why this exists: on a serving box we ship a runtime-only TVM (see
``vllm_tvm.artifacts.runtime_bundle``). Without ``libtvm_compiler.so`` (or with
``TVM_USE_RUNTIME_LIB=1``) ``import tvm`` skips its backend autoload, so neither the CUDA device
API (``libtvm_runtime_cuda.so``) nor disco/sort/random (``libtvm_runtime_extra.so``) get loaded,
and ``tvm.relax`` cannot be imported at all. This module loads those libraries itself and imports
``tvm.runtime.vm``, which is all that running an exported executable needs. It also re-binds the
``runtime.disco`` Python API: TVM binds it before libtvm_runtime_extra.so registers the functions,
so it comes up empty even in a full install.
"""

from __future__ import annotations

import ctypes
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

_SIDECARS = ("tvm_runtime_cuda", "tvm_runtime_extra")
_CUDART_SONAME = "libcudart.so.13"


def _preload_cudart_wheel() -> None:
    """Make ``libcudart.so.13`` of the ``nvidia-cuda-runtime`` wheel (the ``cuda`` extra)
    visible to ``libtvm_runtime_cuda.so``, whose RUNPATH names only its own directory.

    A CUDA runtime the system loader finds wins; the wheel's is loaded globally only when
    there is none, so a box with the toolkit installed behaves as before.
    """
    try:
        ctypes.CDLL(_CUDART_SONAME)
        return
    except OSError:
        pass
    for site in sys.path:
        for candidate in sorted(Path(site).glob(f"nvidia/*/lib/{_CUDART_SONAME}")):
            try:
                ctypes.CDLL(str(candidate), mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                continue


@dataclass(frozen=True)
class TVMRuntime:
    """What ``load_runtime_only`` found.

    Attributes:
        tvm: the imported ``tvm`` package.
        tvm_path: directory of the imported ``tvm`` package.
        runtime_only: True when TVM runs without its compiler library.
        cuda: libtvm_runtime_cuda.so is loaded (CUDA devices usable).
        extra: libtvm_runtime_extra.so is loaded (disco, sort, random).
        cuda_error: why the CUDA runtime did not load, when it did not.
    """

    tvm: ModuleType
    tvm_path: Path
    runtime_only: bool
    cuda: bool
    extra: bool
    cuda_error: str | None


def load_runtime_only(*, require_cuda: bool = False) -> TVMRuntime:
    """Import TVM and load its runtime libraries; idempotent.

    Works for the runtime-only bundle and for a full install alike. Afterwards
    ``tvm.runtime.load_module(path)`` and ``tvm.runtime.vm.VirtualMachine`` are usable.

    Raises:
        RuntimeError: ``require_cuda`` and the CUDA runtime could not be loaded (the message
            carries the loader's reason, e.g. a missing ``libcuda.so.1`` or ``libcudart.so.13``).
    """
    import tvm
    import tvm_ffi
    from tvm_ffi.libinfo import load_lib_ctypes

    loaded = tvm.base._LOADED_LIBS
    lib_dir = Path(loaded["tvm_runtime"]._name).resolve().parent
    errors: dict[str, str] = {}
    if "tvm_runtime_cuda" not in loaded:
        _preload_cudart_wheel()
    for name in _SIDECARS:
        if name in loaded:
            continue
        try:
            loaded[name] = load_lib_ctypes("tvm", name, "RTLD_LOCAL", extra_lib_paths=[lib_dir])
        except (OSError, RuntimeError) as err:
            errors[name] = str(err)
    if "tvm_runtime_extra" in loaded:
        disco_api = importlib.import_module("tvm.runtime.disco._ffi_api")
        tvm_ffi.init_ffi_api("runtime.disco", disco_api.__name__)
    importlib.import_module("tvm.runtime.vm")

    cuda = "tvm_runtime_cuda" in loaded
    if require_cuda and not cuda:
        raise RuntimeError(
            f"TVM's CUDA runtime (libtvm_runtime_cuda.so in {lib_dir}) did not load: "
            f"{errors.get('tvm_runtime_cuda')}"
        )
    return TVMRuntime(
        tvm=tvm,
        tvm_path=Path(tvm.__file__).resolve().parent,
        runtime_only=bool(tvm.base._RUNTIME_ONLY),
        cuda=cuda,
        extra="tvm_runtime_extra" in loaded,
        cuda_error=errors.get("tvm_runtime_cuda"),
    )


def load_runtime(*, require_cuda: bool = False) -> ModuleType:
    """``load_runtime_only(require_cuda=...)`` and return the ``tvm`` package."""
    return load_runtime_only(require_cuda=require_cuda).tvm
