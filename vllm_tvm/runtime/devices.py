"""The devices an engine runs on, and the TVM target kind an artifact must be built for to
run on each.

Why a module of its own, free of TVM: the compiler picks its target from the device, the
model runner checks an artifact against it, and the command line offers the device names
as choices; all three read this one table, and `--help` must not load TVM to list them.
"""

from __future__ import annotations

DEVICE_TARGET_KINDS = {"cpu": "llvm", "cuda": "cuda"}
"""Device name -> the TVM target kind of the artifacts that run on it."""

DEVICES = tuple(DEVICE_TARGET_KINDS)


def target_kind_for(device: str) -> str:
    """The target kind of `device`'s artifacts; an unknown device is refused by name."""
    if device not in DEVICE_TARGET_KINDS:
        raise ValueError(f"unsupported device '{device}'; supported: " + ", ".join(DEVICES))
    return DEVICE_TARGET_KINDS[device]
