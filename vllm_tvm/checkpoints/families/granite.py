"""Granite: the Llama definition with four scalars (embedding, residual, attention and logit
multipliers), read from HF configs and from llama.cpp's `granite` files (`*_scale` keys)."""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.families.llama import BLOCK_TENSORS
from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture, GGUFKey
from vllm_tvm.checkpoints.gguf_file import GGUFFile

GRANITE = "GraniteForCausalLM"


def _options(
    config: dict[str, Any], rope_theta: float, local_theta: float | None
) -> dict[str, Any]:
    """Granite's four scalars (absent keys keep Llama's numerics)."""
    del rope_theta, local_theta
    return {
        "embedding_scale": float(config.get("embedding_multiplier", 1.0)),
        "residual_multiplier": float(config.get("residual_multiplier", 1.0)),
        "attention_multiplier": float(config.get("attention_multiplier", 1.0)),
        "logits_scaling": float(config.get("logits_scaling", 1.0)),
    }


def _gguf_keys(reader: GGUFFile, key: GGUFKey, config: dict[str, Any]) -> dict[str, Any]:
    """Granite's multipliers. `logit_scale` is required (as llama.cpp requires it); an absent
    attention scale means 1 / sqrt(head size) and absent embedding / residual scales 1, as
    llama.cpp reads such a file."""
    del reader
    return {
        "logits_scaling": key("logit_scale"),
        "attention_multiplier": key("attention.scale", config["head_dim"] ** -0.5),
        "embedding_multiplier": key("embedding_scale", 1.0),
        "residual_multiplier": key("residual_scale", 1.0),
    }


FAMILIES = (
    FamilySpec(
        name="granite",
        architectures=(GRANITE,),
        config_options=_options,
        tensor_parallel=True,
        gguf=(
            GGUFArchitecture(
                "granite", GRANITE, BLOCK_TENSORS, permuted_qk=True, config_keys=_gguf_keys
            ),
        ),
    ),
)
