"""What this machine can run, and which registry entry fits it (or why none does).

Why without TVM: a pull must decide before anything is fetched, on a serving box that may
have only TVM's runtime. A CPU artifact is compiled for a processor (LLVM's `mcpu`), so it
runs where the CPU has every instruction-set extension it may use; it is described by the
machine (x86_64, aarch64) and those extensions, read from /proc/cpuinfo. A CUDA artifact
embeds code for one GPU architecture; it runs on a GPU of that compute capability (`sm_90a`
on 9.0), asked of the CUDA driver. A fat one (`cuda:all`) embeds a cubin per SM it lists, which
the driver picks by compute capability, and PTX that the driver compiles for a newer GPU.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import platform
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from vllm_tvm.artifact_registry.index import ArtifactEntry
from vllm_tvm.artifacts.runtime_bundle import MANIFEST_NAME

ISA_FEATURES = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "asimd",
    "asimddp",
    "sve",
    "sve2",
)
"""The CPU flags (as /proc/cpuinfo spells them) that decide whether LLVM's vector code runs."""

CUDA_ATTRIBUTE_MAJOR = 75
CUDA_ATTRIBUTE_MINOR = 76


@dataclass(frozen=True)
class MachineTraits:
    """What an artifact must fit: the target kind and the features of that kind."""

    target_kind: str
    features: dict[str, object] = field(default_factory=dict)
    tvm_version: str = ""


def installed_tvm_version() -> str:
    """The installed apache-tvm's version, read without importing TVM: the package's
    metadata, else the manifest of a runtime-only bundle (`vllm-tvm runtime-bundle`) that
    holds the importable `tvm`, else "none"."""
    try:
        return metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("tvm")
    if spec is None or spec.origin is None:
        return "none"
    bundle_manifest = Path(spec.origin).parent.parent / MANIFEST_NAME
    if not bundle_manifest.is_file():
        return "none"
    return str(json.loads(bundle_manifest.read_text()).get("apache-tvm", "none"))


def cpu_features() -> dict[str, object]:
    """This CPU's machine name and its ISA_FEATURES."""
    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("flags", "Features"):
                flags.update(value.split())
                break
    return {"machine": platform.machine(), "isa": [f for f in ISA_FEATURES if f in flags]}


def cuda_arch() -> str | None:
    """The first GPU's architecture (`sm_90`), or None when no CUDA device answers."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device = ctypes.c_int(0)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    try:
        if driver.cuInit(0) != 0 or driver.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return None
        for attribute, value in ((CUDA_ATTRIBUTE_MAJOR, major), (CUDA_ATTRIBUTE_MINOR, minor)):
            if driver.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) != 0:
                return None
    except AttributeError:
        # A library of that name without the driver API: the link-time stub the CUDA
        # compile loads into this process (compiler/cuda_build.py), not a driver.
        return None
    return f"sm_{major.value}{minor.value}"


def this_machine(target_kind: str) -> MachineTraits:
    """The traits of this machine for artifacts of `target_kind` (`llvm` or `cuda`)."""
    if target_kind == "cuda":
        arch = cuda_arch()
        features: dict[str, object] = {"arch": arch} if arch else {}
    else:
        features = cpu_features()
    return MachineTraits(target_kind, features, installed_tvm_version())


def auto_target_kind() -> str:
    """`cuda` when a CUDA GPU answers, else `llvm`."""
    return "cuda" if cuda_arch() else "llvm"


def why_not(
    entry: ArtifactEntry, machine: MachineTraits, dtype: str, weight_format: str
) -> str | None:
    """Why `entry` does not run here with the asked dtype (`auto`: any) and weight format,
    or None when it does."""
    if entry.target_kind != machine.target_kind:
        return f"built for {entry.target_kind}, this run needs {machine.target_kind}"
    if entry.tvm_version != machine.tvm_version:
        return f"built with TVM {entry.tvm_version}, installed TVM is {machine.tvm_version}"
    if dtype != "auto" and entry.dtype != dtype:
        return f"dtype {entry.dtype}, asked for {dtype}"
    if entry.weight_format != weight_format:
        return f"weight format {entry.weight_format}, asked for {weight_format}"
    if entry.target_kind == "cuda":
        return _cuda_mismatch(entry, machine)
    return _cpu_mismatch(entry, machine)


def _cuda_mismatch(entry: ArtifactEntry, machine: MachineTraits) -> str | None:
    have = machine.features.get("arch")
    if have is None:
        return "no CUDA GPU answers on this machine"
    if "archs" in entry.features:
        return _fat_cuda_mismatch(entry.features, str(have))
    built = str(entry.features.get("arch", "")).rstrip("af")
    if built != have:
        return f"built for {entry.features.get('arch')}, this GPU is {have}"
    return None


def _compute_capability(arch: str) -> int:
    """`sm_90a` -> 90 (major * 10 + minor, as the driver's attributes give it)."""
    return int(arch.removeprefix("sm_").rstrip("af"))


def _fat_cuda_mismatch(features: dict[str, object], have: str) -> str | None:
    """A fat library runs on a GPU with a cubin of its compute capability, or on one newer
    than its PTX (the driver compiles that at load)."""
    archs = [str(a) for a in features["archs"]]  # type: ignore[attr-defined]
    if have in (a.rstrip("af") for a in archs):
        return None
    ptx = features.get("ptx")
    if ptx is not None and _compute_capability(have) >= _compute_capability(str(ptx)):
        return None
    return f"built for {', '.join(archs)} (PTX {ptx}), this GPU is {have}"


def _cpu_mismatch(entry: ArtifactEntry, machine: MachineTraits) -> str | None:
    if entry.features.get("machine") != machine.features.get("machine"):
        return (
            f"built for {entry.features.get('machine')} CPUs, this is "
            f"{machine.features.get('machine')}"
        )
    have = set(machine.features.get("isa", []))  # type: ignore[arg-type]
    missing = [f for f in entry.features.get("isa", []) if f not in have]
    if missing:
        return "this CPU lacks " + ", ".join(missing)
    return None
