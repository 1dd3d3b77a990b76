"""The targets `vllm-tvm embed --target` names, and the refusal of those not built yet.

`host` (this machine's CPU, the default) is built. The cross targets are named so that asking
for one fails with the toolchain it needs instead of silently building for the wrong machine.
Kept free of heavy imports: the CLI reads the choices when it builds its parser.
"""

from __future__ import annotations

HOST_TARGET = "host"
CROSS_TARGETS = {
    "aarch64": "cross-building libvllm_tvm and the TVM runtime for aarch64-linux-gnu "
    "(Debian's g++-aarch64-linux-gnu) and qemu-user to test it",
    "android-arm64": "the Android NDK (ANDROID_NDK_HOME pointing at an NDK with its CMake "
    "toolchain file)",
    "ios-arm64": "Xcode's iOS SDK and its clang (an Apple machine)",
}
EMBED_TARGETS = (HOST_TARGET, *CROSS_TARGETS)


def refuse_unbuilt_target(target: str) -> None:
    """Raise for any target but `host`, naming what that target needs."""
    if target == HOST_TARGET:
        return
    if target in CROSS_TARGETS:
        raise NotImplementedError(
            f"embed target '{target}' is not built by this version of vllm-tvm: it needs "
            f"{CROSS_TARGETS[target]}; run `vllm-tvm embed` on the device itself instead"
        )
    raise ValueError(f"unknown embed target '{target}'; known: {', '.join(EMBED_TARGETS)}")
