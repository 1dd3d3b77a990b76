"""What a release archive's maker and its validator agree on: names, the smoke prompt, and
how the bundle's CLI is started for the archive's machine.

Kept apart so that release_check.py, which must judge an archive by itself, shares no code
path with the maker beyond these facts.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

VERSION_FILE = "VERSION"
MANIFEST = "manifest.json"
SBOM = "sbom.spdx.json"
SMOKE_PROMPT = "Once upon a time"
SMOKE_MAX_TOKENS = 8
LANES = ("cpu", "cuda")
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}
"""ELF e_machine numbers of the machines a bundle is built for."""
CUDA_DRIVER_LIBRARY = "libcuda.so.1"
"""The NVIDIA driver's library: a cuda archive's CUDA runtime needs it, and must never carry
it (it belongs to the kernel driver installed on the machine, in its exact version)."""
LANE_LIBRARIES = {"cpu": (), "cuda": ("lib/libtvm_runtime_cuda.so", "lib/libcudart.so.13")}
"""What each lane must carry beyond a bundle's common files (libvllm_tvm.so loads the CUDA
ones with dlopen, so no ELF dependency names them)."""
CROSS_RUNNERS = {"aarch64": ("qemu-aarch64", "/usr/aarch64-linux-gnu")}
"""Where an archive's CLI runs on another machine: qemu-user and the sysroot it loads from
(scripts/install_native_toolchain.sh --aarch64 installs both)."""


def release_name(version: str, machine: str, lane: str) -> str:
    """`vllm-tvm-<version>-linux-<machine>-<lane>`: the archive's stem and top folder."""
    return f"vllm-tvm-{version}-linux-{machine}-{lane}"


def cli_command(root: Path, machine: str) -> list[str]:
    """The argv prefix that runs `root`/bin/vllm-tvm-cli here (under qemu for another
    machine); raises naming the emulator when it is missing."""
    cli = str(root / "bin" / "vllm-tvm-cli")
    if machine == platform.machine():
        return [cli]
    if machine not in CROSS_RUNNERS:
        raise RuntimeError(f"cannot run {machine} programs on this {platform.machine()} machine")
    emulator, sysroot = CROSS_RUNNERS[machine]
    if shutil.which(emulator) is None:
        raise RuntimeError(f"running the {machine} CLI here needs {emulator} on PATH")
    return [emulator, "-L", sysroot, cli]


_DEVICE_PROBE = f"""
import ctypes, sys
try:
    driver = ctypes.CDLL("{CUDA_DRIVER_LIBRARY}")
except OSError:
    sys.exit("no NVIDIA driver on this machine ({CUDA_DRIVER_LIBRARY} is not found)")
count = ctypes.c_int(0)
if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
    sys.exit("the NVIDIA driver reports no usable device")
if count.value == 0:
    sys.exit("the NVIDIA driver reports no device")
"""


def cuda_device_absent_reason() -> str | None:
    """Why a cuda archive's CLI cannot run a model here (no driver library, or no device), or
    None when the NVIDIA driver answers with at least one device. Asked in a fresh
    interpreter: this process may hold the compiler's stand-in libcuda (compiler/cuda_build.py)."""
    done = subprocess.run(
        [sys.executable, "-c", _DEVICE_PROBE], capture_output=True, text=True, timeout=60
    )
    return None if done.returncode == 0 else done.stderr.strip().splitlines()[-1]
