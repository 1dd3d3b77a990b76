"""The targets `vllm-tvm embed --target` names: what each compiles and builds with.

`host` (this machine's CPU, the default), `aarch64` (64-bit Arm Linux, cross-built here,
run under qemu-user by the tests) and `cuda` (this machine's library with the model compiled
for an NVIDIA GPU, sm_90a, and TVM's CUDA runtime bundled beside it) are built. The phone
presets are named so that asking for one fails with the toolchain it needs instead of
silently building for the wrong machine.
Kept free of heavy imports: the CLI reads the choices when it builds its parser.
"""

from __future__ import annotations

from dataclasses import dataclass

HOST_TARGET = "host"
AARCH64_TARGET = "aarch64"
CUDA_TARGET = "cuda"


@dataclass(frozen=True)
class EmbedTarget:
    """One built target: the compiler's target name, the machine (wheel platform tag, None
    for this one), the C/C++ cross compilers (None for the system's) and whether the bundle
    carries TVM's CUDA runtime (libtvm_runtime_cuda.so and the libcudart.so.13 it needs; the
    driver's libcuda.so.1 is never bundled)."""

    compile_target: str
    machine: str | None = None
    c_compiler: str | None = None
    cxx_compiler: str | None = None
    cuda_runtime: bool = False


BUILT_TARGETS = {
    HOST_TARGET: EmbedTarget("llvm"),
    AARCH64_TARGET: EmbedTarget(
        "llvm:aarch64", "aarch64", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++"
    ),
    CUDA_TARGET: EmbedTarget("cuda", cuda_runtime=True),
}
MISSING_TOOLCHAINS = {
    "android-arm64": "the Android NDK (ANDROID_NDK_HOME pointing at an NDK with its CMake "
    "toolchain file)",
    "ios-arm64": "Xcode's iOS SDK and its clang (an Apple machine)",
}
EMBED_TARGETS = (*BUILT_TARGETS, *MISSING_TOOLCHAINS)


def embed_target(name: str) -> EmbedTarget:
    """The built target `name`; raises naming the missing toolchain or the known names."""
    if name in BUILT_TARGETS:
        return BUILT_TARGETS[name]
    if name in MISSING_TOOLCHAINS:
        raise NotImplementedError(
            f"embed target '{name}' needs {MISSING_TOOLCHAINS[name]}, which this build "
            "machine lacks"
        )
    raise ValueError(f"unknown embed target '{name}'; known: {', '.join(EMBED_TARGETS)}")
