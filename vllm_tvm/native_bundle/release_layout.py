"""What a release archive's maker and its validator agree on: names, the smoke prompt, and
how the bundle's CLI is started for the archive's machine.

Kept apart so that release_check.py, which must judge an archive by itself, shares no code
path with the maker beyond these facts.
"""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

VERSION_FILE = "VERSION"
MANIFEST = "manifest.json"
SBOM = "sbom.spdx.json"
SMOKE_PROMPT = "Once upon a time"
SMOKE_MAX_TOKENS = 8
LANES = ("cpu", "cuda")
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}
"""ELF e_machine numbers of the machines a bundle is built for."""
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
