"""Tiny random hybrid checkpoints (Qwen3-Next, Qwen3.5, Qwen3.5-MoE) as transformers builds
them: the oracle models of the hybrid tests, on shapes that exercise GQA, partial rotary,
tied and untied heads, a shared expert and alternating linear / full layers; and the MTP
layer transformers does not model, written into a saved checkpoint under `mtp.` as vLLM
reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

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


def add_mtp_layer(directory: Path, hf: torch.nn.Module) -> None:
    """Write a random MTP layer into `directory`'s model.safetensors as Qwen3-Next / Qwen3.5
    checkpoints store it (vLLM's qwen3_next_mtp.py): `mtp.fc` [hidden, 2 * hidden], the
    zero-centred norms `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.norm`,
    and `mtp.layers.0.*`, a full-attention layer whose feed-forward is of layer 0's kind
    (tensors of the target's first full layer and of layer 0's mlp, rescaled at random).
    A multimodal checkpoint's decoder (`text_config`, under `model.language_model.`) is
    read the same way; its MTP layer is `mtp.` too."""
    path = directory / "model.safetensors"
    tensors = load_file(path)
    config = getattr(hf.config, "text_config", hf.config)
    layers = (
        "model.language_model.layers." if hasattr(hf.config, "text_config") else "model.layers."
    )
    full = list(config.layer_types).index("full_attention")
    rng = np.random.default_rng(7)
    size = config.hidden_size
    mtp = {
        "mtp.fc.weight": rng.standard_normal((size, 2 * size)) * 0.2,
        **{
            f"mtp.{norm}.weight": rng.standard_normal(size) * 0.2
            for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm")
        },
    }
    for name, value in tensors.items():
        for prefix in (f"{layers}{full}.", f"{layers}0."):
            rest = name.removeprefix(prefix)
            wanted = rest.startswith("mlp.") == (prefix == f"{layers}0.")
            if name.startswith(prefix) and wanted:
                mtp[f"mtp.layers.0.{rest}"] = value * rng.uniform(0.5, 1.5)
    tensors.update({name: np.asarray(value, np.float32) for name, value in mtp.items()})
    save_file(tensors, path, metadata={"format": "pt"})
