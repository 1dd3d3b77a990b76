"""Which kernels the paged KV cache attends with: TVM's TIR kernels or FlashInfer's.

Why: TVM 0.27's TIR attention kernels are generic SIMT code. On the H200 (Llama-3.1-8B
shape) the prefill of 1,024 tokens spent 2.8 ms per layer in them against 0.07 ms for torch's
flash SDPA, and decode over long contexts parallelises only over sequences and KV heads.
FlashInfer's kernels are compiled ahead of time here through TVM's hook
(`tvm.relax.backend.cuda.flashinfer`), linked into the model library as static objects, and
called by TVM's paged KV cache (`FlashInferPagedKVCache`).

FlashInfer is optional: its JIT needs the `flashinfer-python` package (installed without its
GPU-runtime dependencies; see scripts/install_flashinfer.sh), torch, ninja and nvcc, and the
first build of a head-dimension/dtype pair takes minutes. `--attention tir` needs nothing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.backends import ATTENTION_FLASHINFER
from vllm_tvm.artifacts.cache import cache_root
from vllm_tvm.artifacts.compile_options import check_attention
from vllm_tvm.compiler.flashinfer_objects import flashinfer_objects_kept

FLASHINFER_DTYPES = ("float16", "bfloat16")
FLASHINFER_VERSION = "0.6.15.post1"
"""The FlashInfer whose kernel entry points take the arguments TVM 0.27's KV cache passes:
from 0.6.16 on, the prefill plan takes a 20th argument (`uniform_q_len`) and the call fails
at run time with "Expected 20 but got 19 arguments" (seen on the H200 with 0.7.2)."""
_FLASHINFER_MODULES = ("flashinfer", "torch", "ninja", "pynvml", "einops", "tabulate")


def resolve_attention(attention: str, target_kind: str, dtype: str) -> str:
    """Validate `attention` for a target kind and dtype; FlashInfer must be importable."""
    check_attention(attention)
    if attention == ATTENTION_FLASHINFER:
        if target_kind != "cuda" or dtype not in FLASHINFER_DTYPES:
            raise ValueError(
                "attention 'flashinfer' needs a cuda target and dtype float16 or bfloat16; "
                f"got target kind '{target_kind}' and dtype '{dtype}'"
            )
        missing = [name for name in _FLASHINFER_MODULES if importlib.util.find_spec(name) is None]
        if missing:
            raise ValueError(
                "attention 'flashinfer' compiles FlashInfer's kernels with its JIT, which needs "
                f"the Python packages {', '.join(missing)} (scripts/install_flashinfer.sh)"
            )
        installed = importlib.metadata.version("flashinfer-python")
        if installed != FLASHINFER_VERSION:
            raise ValueError(
                f"attention 'flashinfer' needs flashinfer-python {FLASHINFER_VERSION}, whose "
                f"kernel arguments match TVM's paged KV cache; {installed} is installed "
                "(scripts/install_flashinfer.sh)"
            )
    return attention


def check_attention_softcap(attention: str, attn_logit_softcapping: float | None) -> None:
    """Refuse FlashInfer for a model with soft-capped attention scores: its kernels take a
    cap in FlashInfer's own API, but TVM's KV cache does not pass one (`--attention tir`
    has the cap: attention_softcap.py)."""
    if attention == ATTENTION_FLASHINFER and attn_logit_softcapping is not None:
        raise ValueError(
            f"attention 'flashinfer' does not support attn_logit_softcapping="
            f"{attn_logit_softcapping} (TVM's KV cache passes FlashInfer no cap); use "
            "attention 'tir'"
        )


@contextlib.contextmanager
def flashinfer_build_environment(arch: str, libcuda_stub: Path) -> Iterator[None]:
    """Environment for FlashInfer's JIT to build `arch` objects on a machine without a GPU.

    Sets the architecture list (e.g. sm_90a -> 9.0a), CUDA_HOME from nvcc, and a link
    directory holding `libcuda.so` (our stub driver), which FlashInfer's final link names.
    Objects an earlier compile built for the same arguments are linked instead of rebuilt
    (flashinfer_objects.py).
    """
    toolkit = cuda_toolkit_root()
    digits = arch.removeprefix("sm_")
    suffix = "a" if digits.endswith("a") else ""
    version = digits.removesuffix("a")
    link_dir = Path(tempfile.mkdtemp(prefix="vllm-tvm-flashinfer-link-"))
    (link_dir / "libcuda.so").symlink_to(libcuda_stub)
    settings = {
        "FLASHINFER_CUDA_ARCH_LIST": f"{version[:-1]}.{version[-1]}{suffix}",
        "CUDA_HOME": str(toolkit),
        "LIBRARY_PATH": os.pathsep.join(
            part for part in (str(link_dir), os.environ.get("LIBRARY_PATH", "")) if part
        ),
    }
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    kept = cache_root() / "flashinfer_objects"
    try:
        with _object_paths_as_built(), flashinfer_objects_kept(kept, toolkit):
            yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(link_dir, ignore_errors=True)


@contextlib.contextmanager
def _object_paths_as_built() -> Iterator[None]:
    """Make FlashInfer report the object files its build wrote.

    flashinfer-python 0.6.15 to 0.7.2 name each object `<source dir>_<source stem>.cuda.o`
    in the ninja file they write, but `get_object_paths()` (which TVM's hook links) still
    answers `<source stem>.cuda.o`, so the link finds no file. For the duration of the build
    a reported path that does not exist is replaced by the as-built name when that exists.
    """
    from flashinfer.jit import core

    spec_class = getattr(core, "JitSpecNvcc", None) or core.JitSpec
    reported = spec_class.get_object_paths

    def as_built(spec: Any) -> list[Path]:
        paths = []
        for source, path in zip(spec.sources, reported(spec), strict=True):
            built = path.with_name(f"{source.parent.name}_{path.name}")
            paths.append(built if not path.exists() and built.exists() else path)
        return paths

    spec_class.get_object_paths = as_built
    try:
        yield
    finally:
        spec_class.get_object_paths = reported


def cudart_link_options() -> list[str]:
    """Linker options for a model library that carries FlashInfer's objects, which call the
    CUDA runtime: libcudart of the toolkit, recorded as needed even though TVM places
    options before the objects (where `--as-needed` would drop it)."""
    return [f"-L{cuda_toolkit_root() / 'lib64'}", "-Wl,--no-as-needed", "-lcudart"]


def cuda_toolkit_root() -> Path:
    """The CUDA toolkit: `$CUDA_HOME`, else `/usr/local/cuda`, else the directory above a
    real `nvcc` binary on PATH (a wrapper script there says nothing about the toolkit)."""
    candidates = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    for candidate in candidates:
        if candidate and (Path(candidate) / "lib64").is_dir():
            return Path(candidate)
    raise RuntimeError(
        "no CUDA toolkit found (set CUDA_HOME); FlashInfer's kernels are compiled with nvcc "
        "and linked against its libcudart"
    )
