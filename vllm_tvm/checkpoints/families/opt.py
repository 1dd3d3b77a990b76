"""OPT: the learned-position definition (OPT's position table starts two rows in). llama.cpp
defines no OPT architecture, so an `opt` GGUF file is refused by name."""

from __future__ import annotations

from vllm_tvm.checkpoints.family_spec import FamilySpec

FAMILIES = (
    FamilySpec(
        name="opt",
        architectures=("OPTForCausalLM",),
        definition="opt",
        refused_gguf={
            "opt": "llama.cpp defines no OPT architecture, so no converter writes such a file; "
            "load OPT from its HF directory",
        },
    ),
)
