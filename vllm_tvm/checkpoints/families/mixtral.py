"""Mixtral: a Llama whose feed-forward routes each token to experts; llama.cpp writes it as
a `llama` file with `llama.expert_count` (families/llama.py reads it through this module).
"""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFKey
from vllm_tvm.checkpoints.gguf_expert_config import per_model_count, refuse_routing_keys
from vllm_tvm.checkpoints.gguf_expert_tensors import MIXTRAL_PROJECTIONS, routed_tensors
from vllm_tvm.checkpoints.gguf_file import GGUFFile

MIXTRAL = "MixtralForCausalLM"

GGUF_EXPERT_TENSORS = routed_tensors("block_sparse_moe", MIXTRAL_PROJECTIONS)
"""What a `llama` file with experts adds to the llama per-block tensors."""


def gguf_expert_keys(reader: GGUFFile, key: GGUFKey, config: dict[str, Any]) -> dict[str, Any]:
    """The Mixtral keys of a `llama` file with experts; nothing for a dense one."""
    del config
    experts = key("expert_count", None)
    if experts is None:
        if any(t.name.endswith("ffn_gate_inp.weight") for t in reader.tensors):
            raise ValueError("GGUF llama file has expert tensors but no llama.expert_count")
        return {}
    refuse_routing_keys(key, "llama")
    return {
        "architectures": [MIXTRAL],
        "model_type": "mixtral",
        "num_local_experts": per_model_count(experts, "expert_count"),
        "num_experts_per_tok": per_model_count(key("expert_used_count"), "expert_used_count"),
    }


def _attention_options(
    config: dict[str, Any], rope_theta: float, local_theta: float | None
) -> dict[str, Any]:
    """Mixtral's attention has no output-projection bias whatever `attention_bias` says."""
    del config, rope_theta, local_theta
    return {"o_proj_bias": False}


FAMILIES = (
    FamilySpec(
        name="mixtral",
        architectures=(MIXTRAL,),
        definition="moe",
        config_options=_attention_options,
    ),
)
