"""Named compilation targets.

Why this exists: TVM 0.27 no longer parses target strings with options ("cuda -arch=sm_90"),
and a bare {"kind": "cuda"} lacks attributes that our kernels read (the paged-KV kernels index
``max_shared_memory_per_block``) and leaves the GPU architecture to device detection, which
fails on a build machine without a GPU. Every build therefore goes through one of the presets
below, chosen by a short stable name that the CLI, the artifact manifest and the tests share.
Building the ``tvm.target.Target`` is deferred to ``TargetSpec.make_target`` so that this module
imports without TVM's compiler (runtime-only serving boxes can still resolve names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tvm

DEFAULT_CUDA_ARCH = "sm_90a"
CUDA_ARCHS = (
    "sm_80",  # A100
    "sm_86",  # RTX 30xx, A10, A40
    "sm_87",  # Jetson Orin
    "sm_89",  # RTX 40xx, L4, L40
    "sm_90a",  # H100, H200
    "sm_100a",  # B200
    "sm_103a",  # B300
    "sm_110",  # Jetson Thor
    "sm_120a",  # RTX 50xx
    "sm_121a",  # DGX Spark
)
"""Every SM nvcc 13 builds for from sm_80 on, in compute-capability order."""
FAT_CUDA_ALL = "cuda:all"
"""A fat library of every CUDA_ARCHS; `cuda:sm_80,sm_86` names a list of them."""

_DEFAULT_ROCM_ARCH = "gfx942"
AARCH64_CROSS_COMPILER = "aarch64-linux-gnu-g++"
"""Debian's g++-aarch64-linux-gnu (scripts/install_native_toolchain.sh --aarch64)."""

# Names someone might reasonably try, refused with the reason rather than "unknown".
_REFUSED = {
    "vulkan": "apache-tvm 0.27 ships no SPIR-V code generator (target.build.vulkan is absent)",
}

# Limits shared by every NVIDIA GPU from sm_80 on, as TVM's own CUDA tags state them;
# 49152 is the shared memory a block gets without the opt-in attribute.
_CUDA_LIMITS = {
    "max_shared_memory_per_block": 49152,
    "max_threads_per_block": 1024,
    "thread_warp_size": 32,
    "registers_per_block": 65536,
}


@dataclass(frozen=True)
class TargetSpec:
    """One compilation target: what to pass to TVM and how to describe the result.

    Attributes:
        name: canonical name, e.g. ``"llvm"`` or ``"cuda:sm_90a"`` (what manifests record).
        kind: TVM target kind: ``"llvm"``, ``"cuda"``, ``"rocm"``, ``"metal"``, ``"webgpu"``.
        arch: GPU architecture (``"sm_90a"``, ``"gfx942"``), None for CPU/metal/webgpu.
        device: TVM runtime device name that runs the result (``"cpu"``, ``"cuda"``, ...).
        build_only: True where the apache-tvm wheel has no runtime for the kind, so the
            result can be compiled here but not executed by this project.
        config: the dict that ``tvm.target.Target`` accepts (host included).
        cross_compiler: the C++ compiler that links the library for another machine (e.g.
            ``aarch64-linux-gnu-g++``), None for this machine's.
        fat_archs: for a fat CUDA library, the SMs it carries a cubin for (the driver picks
            the one of the device's compute capability, and JIT-compiles the PTX of ``arch``
            on a newer GPU); empty for a library of one SM.
    """

    name: str
    kind: str
    arch: str | None
    device: str
    build_only: bool
    config: Mapping[str, Any] = field(hash=False)
    cross_compiler: str | None = None
    fat_archs: tuple[str, ...] = ()

    def resolved_config(self) -> dict[str, Any]:
        """The target dict with host-dependent fields filled in (needs TVM's compiler).

        The CPU target names this machine's processor (`mcpu`), so LLVM may use its vector
        units; artifacts are therefore per processor, and this dict is part of the cache key.
        """
        config = _plain(self.config)
        if self.kind == "llvm" and "mcpu" not in config:
            from tvm.target import codegen

            config["mcpu"] = codegen.llvm_get_system_cpu()
        return config

    def make_target(self) -> tvm.target.Target:
        """Build the ``tvm.target.Target`` (needs TVM's compiler library)."""
        from tvm.target import Target

        return Target(self.resolved_config())


def _plain(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in config.items()}


def _spec(
    name: str, kind: str, arch: str | None, device: str, build_only: bool, config: dict[str, Any]
) -> TargetSpec:
    return TargetSpec(name, kind, arch, device, build_only, MappingProxyType(config))


def _presets() -> dict[str, TargetSpec]:
    host = {"kind": "llvm"}
    # fp reassociation lets LLVM vectorise the fp32 dot products of the CPU matmul schedule.
    cpu = {"kind": "llvm", "fast-math-reassoc": True, "fast-math-contract": True}
    specs = [_spec("llvm", "llvm", None, "cpu", False, cpu)]
    # 64-bit Arm Linux (Raspberry Pi 4/5, Jetson, phones' cores): NEON is part of the baseline.
    aarch64 = {**cpu, "mtriple": "aarch64-linux-gnu", "mcpu": "generic", "mattr": ["+neon"]}
    specs.append(
        TargetSpec(
            "llvm:aarch64",
            "llvm",
            "aarch64",
            "cpu",
            True,
            MappingProxyType(aarch64),
            cross_compiler=AARCH64_CROSS_COMPILER,
        )
    )
    specs += [
        _spec(
            f"cuda:{arch}",
            "cuda",
            arch,
            "cuda",
            False,
            {"kind": "cuda", "arch": arch, **_CUDA_LIMITS, "host": host},
        )
        for arch in CUDA_ARCHS
    ]
    rocm = _DEFAULT_ROCM_ARCH
    specs += [
        _spec(
            f"rocm:{rocm}", "rocm", rocm, "rocm", True, {"kind": "rocm", "mcpu": rocm, "host": host}
        ),
        _spec(
            "metal",
            "metal",
            None,
            "metal",
            True,
            {"kind": "metal", "host": {"kind": "llvm", "mtriple": "arm64-apple-macos"}},
        ),
        _spec(
            "webgpu",
            "webgpu",
            None,
            "webgpu",
            True,
            {"kind": "webgpu", "host": {"kind": "llvm", "mtriple": "wasm32-unknown-unknown-wasm"}},
        ),
    ]
    return {spec.name: spec for spec in specs}


PRESETS: Mapping[str, TargetSpec] = MappingProxyType(_presets())
ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "cuda": f"cuda:{DEFAULT_CUDA_ARCH}",
        "rocm": f"rocm:{_DEFAULT_ROCM_ARCH}",
        "aarch64": "llvm:aarch64",
    }
)


def supported_target_names() -> list[str]:
    """All names ``resolve_target`` accepts: aliases first, then canonical names."""
    return [*ALIASES, *PRESETS]


def fat_cuda_target(archs: list[str]) -> TargetSpec:
    """One library with a cubin per SM in ``archs`` and the PTX of the oldest.

    Its kernels are generated once, for the oldest SM without its architecture-specific
    suffix (``sm_90a`` -> ``sm_90``), so the same code is valid for every SM listed: nvcc then
    assembles it per SM (``arch`` is that code's SM, also the PTX's compute capability).

    Raises:
        ValueError: an SM that is not in CUDA_ARCHS, named with every accepted one.
    """
    unknown = [a for a in archs if a not in CUDA_ARCHS]
    if unknown:
        raise ValueError(
            f"unsupported CUDA architecture {unknown[0]!r}; supported: " + ", ".join(CUDA_ARCHS)
        )
    ordered = tuple(a for a in CUDA_ARCHS if a in archs)
    base = ordered[0].rstrip("af")
    config = {"kind": "cuda", "arch": base, **_CUDA_LIMITS, "host": {"kind": "llvm"}}
    return TargetSpec(
        "cuda:" + ",".join(ordered),
        "cuda",
        base,
        "cuda",
        False,
        MappingProxyType(config),
        fat_archs=ordered,
    )


def _fat_cuda_list(key: str) -> list[str] | None:
    """The SMs of ``cuda:all`` or ``cuda:sm_a,sm_b,...``; None for any other name."""
    if key == FAT_CUDA_ALL:
        return list(CUDA_ARCHS)
    kind, _, rest = key.partition(":")
    if kind != "cuda" or "," not in rest:
        return None
    return [part.strip() for part in rest.split(",") if part.strip()]


def resolve_target(name: str) -> TargetSpec:
    """Return the preset for ``name`` (e.g. ``"cuda"``, ``"cuda:sm_80"``, ``"llvm"``), or the
    fat CUDA target of ``cuda:all`` / ``cuda:sm_80,sm_86,...`` (see ``fat_cuda_target``).

    Raises:
        ValueError: the name is unknown or refused; the message names the bad value, the
            reason when there is one, and every accepted name.
    """
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    fat = _fat_cuda_list(key)
    if fat is not None:
        return fat_cuda_target(fat)
    accepted = ", ".join([*supported_target_names(), FAT_CUDA_ALL, "cuda:sm_80,sm_86,..."])
    if key in _REFUSED:
        raise ValueError(f"unsupported target {name!r}: {_REFUSED[key]}; supported: {accepted}")
    raise ValueError(f"unsupported target {name!r}; supported: {accepted}")
