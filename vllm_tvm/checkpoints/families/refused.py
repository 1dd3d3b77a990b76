"""Architectures refused by name: models whose parts no definition here has, so a checkpoint
of one fails before a compile with what is missing rather than as an unknown name."""

from __future__ import annotations

from vllm_tvm.checkpoints.family_spec import FamilySpec

FAMILIES = (
    FamilySpec(
        name="refused",
        architectures=(),
        refused={
            "GptOssForCausalLM": "gpt-oss (attention sinks, clamped SwiGLU with expert biases)",
            "Glm4MoeForCausalLM": "GLM-4.5 (sigmoid group routing with partial rotary attention)",
            "JambaForCausalLM": "Jamba (hybrid Mamba layers)",
            "GraniteMoeHybridForCausalLM": "Granite-4 hybrid (Mamba layers)",
        },
    ),
)
