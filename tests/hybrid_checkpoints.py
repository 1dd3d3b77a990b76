"""Tiny random hybrid checkpoints (Qwen3-Next, Qwen3.5, Qwen3.5-MoE) as transformers builds
them: the oracle models of the hybrid tests, on shapes that exercise GQA, partial rotary,
tied and untied heads, a shared expert and alternating linear / full layers."""

from __future__ import annotations

from typing import Any

import torch

from vllm_tvm.checkpoints.families.qwen3_next import QWEN3_5, QWEN3_NEXT

SHAPE = {
    "vocab_size": 96,
    "hidden_size": 48,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "full_attention"] * 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
    "rms_norm_eps": 1e-6,
}
EXPERTS = {
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 24,
}
ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}


def hf_hybrid_model(architecture: str, **overrides: Any) -> torch.nn.Module:
    """A random fp32 model of `architecture` on SHAPE (and EXPERTS), `overrides` replacing
    config keys."""
    shape = {**SHAPE, **overrides}
    if architecture == QWEN3_NEXT:
        from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

        options = {"mlp_only_layers": [0], **shape}
        config = Qwen3NextConfig(
            **EXPERTS, **options, rope_parameters=ROPE, tie_word_embeddings=False
        )
        model = Qwen3NextForCausalLM(config)
    elif architecture == QWEN3_5:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        rope = {**ROPE, "mrope_section": [1, 1, 0]}
        config = Qwen3_5TextConfig(**shape, rope_parameters=rope, tie_word_embeddings=True)
        model = Qwen3_5ForCausalLM(config)
    else:
        from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

        rope = {**ROPE, "mrope_section": [1, 1, 0]}
        config = Qwen3_5MoeTextConfig(
            **EXPERTS, **shape, rope_parameters=rope, tie_word_embeddings=False
        )
        model = Qwen3_5MoeForCausalLM(config)
    config._attn_implementation = "eager"
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
            if name.endswith("A_log"):
                param.copy_(torch.log(torch.rand(param.shape, generator=generator) * 4 + 0.5))
    return model.float().eval()
