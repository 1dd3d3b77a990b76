"""Lookups over the family modules: which family owns an HF or GGUF architecture name, and
which names are refused and why.

Why computed per call from `families.FAMILY_MODULES`: the list of modules is the only
place a family is registered, so a family added to it is seen by the config parser, the
GGUF reader and the registry at once, with no second table to keep in step (the list is
a few dozen names: scanning it costs nothing next to reading a checkpoint).
"""

from __future__ import annotations

from vllm_tvm.checkpoints import families
from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture


def all_families() -> tuple[FamilySpec, ...]:
    """Every family of every registered family module, in list order."""
    return tuple(spec for module in families.FAMILY_MODULES for spec in module.FAMILIES)


def family_of(architecture: str) -> FamilySpec | None:
    """The family that serves HF architecture `architecture`, or None."""
    for spec in all_families():
        if architecture in spec.architectures:
            return spec
    return None


def served_architectures() -> list[str]:
    """Every HF architecture some family serves."""
    return [name for spec in all_families() for name in spec.architectures]


def refusal_of(architecture: str) -> str | None:
    """What is missing for HF architecture `architecture` when it is refused by name."""
    for spec in all_families():
        if architecture in spec.refused:
            return spec.refused[architecture]
    return None


def gguf_architectures() -> dict[str, GGUFArchitecture]:
    """Every GGUF architecture served, by its `general.architecture` name."""
    return {arch.name: arch for spec in all_families() for arch in spec.gguf}


def gguf_refusal_of(name: str) -> str | None:
    """Why GGUF architecture `name` is refused by name, or None."""
    for spec in all_families():
        if name in spec.refused_gguf:
            return spec.refused_gguf[name]
    return None
