"""Which instruction sets a native llama.cpp build may use on this machine.

Why: `-DGGML_NATIVE=ON` compiles for every feature /proc/cpuinfo lists. Some VMs of our kind
list `amx_tile` / `amx_int8` / `amx_bf16` there, but the kernel grants no AMX tile state to
processes (the XTILEDATA permission request fails), so ggml's AMX kernels die with SIGILL on
their first tile load. The peer must run on every machine of the kind, so where the state is
not granted the build turns AMX off (`-mno-amx-*`: GCC lets explicit `-mno-` flags win over
`-march=native` whatever their order) and records that in the result file.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
SYS_ARCH_PRCTL_X86_64 = 158
AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
NO_AMX = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")


def listed_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first processor's `flags` line of /proc/cpuinfo (empty where there is none)."""
    if not cpuinfo.exists():
        return set()
    for line in cpuinfo.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def amx_tile_state_granted() -> bool:
    """Whether the kernel lets this process use AMX tiles (Linux's XTILEDATA permission),
    asked by `arch_prctl(ARCH_REQ_XCOMP_PERM)`: what a process must do before its first tile
    instruction, so a refusal here is exactly the case in which ggml's AMX kernels fault."""
    if os.uname().machine != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(SYS_ARCH_PRCTL_X86_64, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0


def native_build_flags(flags: set[str] | None = None, amx_granted: bool | None = None) -> list[str]:
    """Extra C/C++ flags for a `GGML_NATIVE=ON` build: `-mno-amx-*` when cpuinfo lists AMX but
    the tile state is not granted, else none."""
    listed = listed_cpu_flags() if flags is None else flags
    if not listed & set(AMX_FLAGS):
        return []
    granted = amx_tile_state_granted() if amx_granted is None else amx_granted
    return [] if granted else list(NO_AMX)
