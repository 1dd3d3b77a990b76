"""Qwen2-MoE and Qwen3-MoE: Qwen's attention with routed experts (Qwen2-MoE adds an
always-on expert behind a sigmoid gate), and llama.cpp's `qwen2moe` / `qwen3moe` files."""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.families.llama import ATTENTION_TENSORS, QK_NORM, QKV_BIAS
from vllm_tvm.checkpoints.families.qwen import SLIDING_WINDOW_SWITCH
from vllm_tvm.checkpoints.family_spec import (
    FamilySpec,
    GGUFArchitecture,
    GGUFConfigKeys,
    GGUFKey,
)
from vllm_tvm.checkpoints.gguf_expert_config import per_model_count, refuse_routing_keys
from vllm_tvm.checkpoints.gguf_expert_tensors import (
    PROJECTIONS,
    routed_tensors,
    shared_expert_tensors,
)
from vllm_tvm.checkpoints.gguf_file import GGUFFile

QWEN2_MOE = "Qwen2MoeForCausalLM"
QWEN3_MOE = "Qwen3MoeForCausalLM"


def _options(
    config: dict[str, Any], rope_theta: float, local_theta: float | None
) -> dict[str, Any]:
    """Qwen2-MoE's q/k/v bias is its own `qkv_bias` key (default on); Qwen3-MoE norms q/k per
    head; neither has an output-projection bias."""
    del rope_theta, local_theta
    if config["architectures"][0] == QWEN2_MOE:
        return {"qkv_bias": bool(config.get("qkv_bias", True)), "o_proj_bias": False}
    return {"qk_norm": True, "o_proj_bias": False}


def _gguf_keys(arch: str, normalised_top_k: bool) -> GGUFConfigKeys:
    """The expert keys of a `qwen2moe` / `qwen3moe` file. llama.cpp fixes per architecture
    what the file does not store: Qwen2-MoE never renormalises the chosen experts' weights,
    Qwen3-MoE always does (src/models/qwen2moe.cpp, qwen3moe.cpp), and every layer routes."""

    def keys(reader: GGUFFile, key: GGUFKey, config: dict[str, Any]) -> dict[str, Any]:
        del config
        refuse_routing_keys(key, arch)
        expert_keys = {
            "model_type": "qwen2_moe" if arch == "qwen2moe" else "qwen3_moe",
            "num_experts": per_model_count(key("expert_count", None), "expert_count"),
            "num_experts_per_tok": per_model_count(key("expert_used_count"), "expert_used_count"),
            "moe_intermediate_size": per_model_count(
                key("expert_feed_forward_length"), "expert_feed_forward_length"
            ),
            "norm_topk_prob": normalised_top_k,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        }
        if arch == "qwen2moe":
            expert_keys["qkv_bias"] = any(t.name == "blk.0.attn_q.bias" for t in reader.tensors)
            expert_keys["shared_expert_intermediate_size"] = per_model_count(
                key("expert_shared_feed_forward_length", 0), "expert_shared_feed_forward_length"
            )
        return expert_keys

    return keys


_ROUTED = {**ATTENTION_TENSORS, **routed_tensors("mlp", PROJECTIONS)}

FAMILIES = (
    FamilySpec(
        name="qwen-moe",
        architectures=(QWEN2_MOE, QWEN3_MOE),
        definition="moe",
        config_options=_options,
        sliding_window_switch=SLIDING_WINDOW_SWITCH,
        gguf=(
            GGUFArchitecture(
                "qwen2moe",
                QWEN2_MOE,
                {
                    **_ROUTED,
                    **QKV_BIAS,
                    **shared_expert_tensors("mlp.shared_expert"),
                    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
                },
                config_keys=_gguf_keys("qwen2moe", normalised_top_k=False),
            ),
            GGUFArchitecture(
                "qwen3moe",
                QWEN3_MOE,
                {**_ROUTED, **QK_NORM},
                config_keys=_gguf_keys("qwen3moe", normalised_top_k=True),
            ),
        ),
    ),
)
