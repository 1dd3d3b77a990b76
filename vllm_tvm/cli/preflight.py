"""Checks of the cheap inputs of a command, run before anything slow, and the start-up
preparation (`prepare_command_start`) that keeps a command from loading what it will not use.

Why: loading TVM takes seconds and a first compile tens of seconds, so a typo (an empty
prompt, `--port 99999`, a port already taken, `--device cuda` on a machine without a GPU, a
model path that is not there) must be refused first, with the value named, not found by a
raw traceback after the slow start. And `import tvm` pulls in torch, ml_dtypes and TVM's
compiler library when they are installed: seconds of every start that a cached start needs
none of. Nothing here imports TVM.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import sys
from pathlib import Path

from vllm_tvm.artifacts.manifest import MANIFEST_NAME
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.weights.load_format import DUMMY

IMPORT_TORCH_ENV = "VLLM_TVM_IMPORT_TORCH"
"""Set to 1 to let TVM's FFI import torch in a command that does not need it."""

IMPORT_ML_DTYPES_ENV = "VLLM_TVM_IMPORT_ML_DTYPES"
"""Set to 1 to let TVM's FFI import ml_dtypes where a cached GGUF start would skip it."""

PLAIN_FLOAT_DTYPES = ("float32", "float16")
"""Parameter dtypes that numpy holds without ml_dtypes."""

RUNTIME_ONLY_ENV = "TVM_USE_RUNTIME_LIB"
"""TVM's own switch: `import tvm` loads libtvm_runtime alone, not the compiler library."""


def check_port(host: str, port: int) -> None:
    """Refuse a port outside 0..65535 (0: any free port), or one that `host` cannot bind now
    (in use)."""
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {port}")
    with socket.socket(_address_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            reason = "is in use" if err.errno == errno.EADDRINUSE else f"cannot be bound ({err})"
            raise ValueError(f"--port {port} on {host} {reason}") from None


def _address_family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def check_device(device: str | None) -> None:
    """Refuse `--device cuda` when no CUDA driver with a device answers (asked of libcuda
    directly: TVM would report it only after loading, compiling, and a raw traceback)."""
    if device != "cuda":
        return
    problem = _cuda_problem()
    if problem is not None:
        raise ValueError(f"--device cuda: {problem}; use --device cpu")


def _cuda_problem() -> str | None:
    """Why no CUDA device is usable, or None when at least one is."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver found (libcuda.so.1 cannot be loaded)"
    status = driver.cuInit(0)
    if status != 0:
        return f"the CUDA driver does not start (cuInit error {status}: no usable GPU)"
    count = ctypes.c_int(0)
    status = driver.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value < 1:
        return "the CUDA driver sees no GPU"
    return None


def read_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """The prompt text: `--prompt TEXT`, `--prompt -` (standard input) or `--prompt-file
    FILE`; exactly one of them, and not empty."""
    if (prompt is None) == (prompt_file is None):
        raise ValueError("give exactly one of --prompt TEXT, --prompt - (stdin), --prompt-file")
    if prompt_file is not None:
        source = f"--prompt-file {prompt_file}"
        try:
            with open(prompt_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as err:
            raise ValueError(f"{source}: {err.strerror}") from None
        except UnicodeDecodeError as err:
            raise ValueError(f"{source}: {_not_utf8(err)}") from None
    elif prompt == "-":
        source = "standard input (--prompt -)"
        stream = getattr(sys.stdin, "buffer", None)  # bytes, decoded strictly: the locale may not
        try:
            text = stream.read().decode("utf-8") if stream is not None else sys.stdin.read()
        except UnicodeDecodeError as err:
            raise ValueError(f"{source}: {_not_utf8(err)}") from None
    else:
        text, source = prompt or "", "--prompt"
    if not text.strip():
        raise ValueError(f"the prompt from {source} is empty")
    return text


def _not_utf8(err: UnicodeDecodeError) -> str:
    return f"not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start})"


def skip_torch_import(needs_torch: bool) -> None:
    """Keep `import tvm` from importing torch when the command has no use for it.

    TVM 0.27's FFI (`tvm_ffi`) imports torch, when installed, for DLPack interop: about 2 s
    of every start. A None in `sys.modules` makes `import torch` fail as if absent, which
    tvm_ffi accepts. Commands that draw dummy weights with torch pass `needs_torch`."""
    if needs_torch or os.environ.get(IMPORT_TORCH_ENV) == "1" or "torch" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]


def skip_ml_dtypes_import(engine: EngineArgs) -> None:
    """Keep `import tvm` from importing ml_dtypes when the command loads no array it names.

    TVM's FFI imports ml_dtypes, when installed, only to name its bfloat16 and float8 numpy
    types; loading its extension costs about 0.9 s of CPU per start. A built artifact
    (`engine.artifact`, settled by entrypoints/resolve.py) whose parameters are all float32,
    float16 or integer planes, loaded from a GGUF file (whose tensors are read as float32 or
    raw blocks), never holds such an array: there a None in `sys.modules` makes the import
    fail as if absent, which tvm_ffi accepts, and any later use fails by name. Dummy weights,
    other checkpoint formats and artifacts still to be compiled keep it."""
    if (
        engine.artifact is None
        or engine.load_format == DUMMY
        or Path(engine.model).suffix != ".gguf"
        or os.environ.get(IMPORT_ML_DTYPES_ENV) == "1"
        or "tvm" in sys.modules
        or "ml_dtypes" in sys.modules
    ):
        return
    try:
        params = json.loads((Path(engine.artifact) / MANIFEST_NAME).read_text("utf-8"))["params"]
        dtypes = {param["dtype"] for param in params}
    except (OSError, ValueError, KeyError, TypeError):
        return
    if all(dtype in PLAIN_FLOAT_DTYPES or dtype.startswith(("int", "uint")) for dtype in dtypes):
        sys.modules["ml_dtypes"] = None  # type: ignore[assignment]


def select_runtime_library(engine: EngineArgs) -> None:
    """Tell TVM to load its runtime library alone (the compiler library, LLVM inside, costs
    about a second and hundreds of MB) when nothing will compile: the artifact is settled
    (given, pulled or remembered, entrypoints/resolve.py) and no draft model's artifact is
    still to resolve (it may compile); unless TVM is already imported or the switch is set."""
    spec = engine.speculative_config
    draft_unresolved = spec is not None and spec.model is not None and spec.draft_artifact is None
    if engine.artifact is not None and "tvm" not in sys.modules and not draft_unresolved:
        os.environ.setdefault(RUNTIME_ONLY_ENV, "1")


def prepare_command_start(engine: EngineArgs) -> None:
    """The start-up preparation of a command that runs an engine, done before anything
    imports TVM (entrypoints/resolve.py calls it once the checkpoint and any settled
    artifact are known): no torch unless dummy weights need it, TVM's runtime library alone
    when nothing will compile, no ml_dtypes when no loaded array can need it."""
    skip_torch_import(needs_torch=engine.load_format == DUMMY)
    select_runtime_library(engine)
    skip_ml_dtypes_import(engine)
