"""DeepSeek-V2 / V3: latent attention (MLA) and grouped expert routing, and llama.cpp's
`deepseek2` files, whose whole config is built here.

Why the GGUF config is its own: a `deepseek2` file shares almost nothing with the
llama-family keys (latent attention ranks and head sizes, yarn with mscale); V3 files are
`deepseek2` too, told apart by the router's gating function.
"""

from __future__ import annotations

from typing import Any

from gguf import ExpertGatingFuncType

from vllm_tvm.checkpoints.families.llama import BLOCK_TENSORS, DENSE_FFN
from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture, GGUFKey
from vllm_tvm.checkpoints.gguf_expert_config import per_model_count
from vllm_tvm.checkpoints.gguf_expert_tensors import (
    MLA_TENSORS,
    PROJECTIONS,
    routed_tensors,
    shared_expert_tensors,
)
from vllm_tvm.checkpoints.gguf_reader import float32_decimal

DEEPSEEK_V2 = "DeepseekV2ForCausalLM"
DEEPSEEK_V3 = "DeepseekV3ForCausalLM"


def _gguf_config(key: GGUFKey) -> dict[str, Any]:
    """The HF config of a `deepseek2` file: DeepSeek-V3 when its router gates by sigmoid
    (with the `exp_probs_b` correction bias), else DeepSeek-V2 (softmax; old files that
    carry no gating function are V2 to llama.cpp too)."""
    gating = key("expert_gating_func", int(ExpertGatingFuncType.SOFTMAX))
    if gating not in (ExpertGatingFuncType.SOFTMAX, ExpertGatingFuncType.SIGMOID):
        raise ValueError(
            f"unsupported deepseek2.expert_gating_func {gating}; supported: 1 (softmax), "
            "2 (sigmoid)"
        )
    is_v3 = gating == ExpertGatingFuncType.SIGMOID
    groups = per_model_count(key("expert_group_count", 1), "expert_group_count") or 1
    rope = per_model_count(key("rope.dimension_count"), "rope.dimension_count")
    # llama.cpp's MLA files give the per-head sizes as *_mla keys (key_length is then the
    # latent + rope width of its MQA view); files before them give them as key/value_length.
    key_length = key("attention.key_length_mla", None) or key("attention.key_length")
    value_length = key("attention.value_length_mla", None) or key("attention.value_length")
    heads = per_model_count(key("attention.head_count"), "attention.head_count")
    if is_v3:
        topk_method = "noaux_tc"
    else:
        topk_method = "group_limited_greedy" if groups > 1 else "greedy"
    config: dict[str, Any] = {
        "architectures": [DEEPSEEK_V3 if is_v3 else DEEPSEEK_V2],
        "model_type": "deepseek_v3" if is_v3 else "deepseek_v2",
        "hidden_size": key("embedding_length"),
        "intermediate_size": per_model_count(key("feed_forward_length"), "feed_forward_length"),
        "moe_intermediate_size": per_model_count(
            key("expert_feed_forward_length"), "expert_feed_forward_length"
        ),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "n_routed_experts": per_model_count(key("expert_count"), "expert_count"),
        "num_experts_per_tok": per_model_count(key("expert_used_count"), "expert_used_count"),
        "n_shared_experts": per_model_count(key("expert_shared_count", 0), "expert_shared_count"),
        "first_k_dense_replace": key("leading_dense_block_count", 0),
        "routed_scaling_factor": key("expert_weights_scale", 1.0),
        "norm_topk_prob": bool(key("expert_weights_norm", False)),
        "n_group": groups,
        "topk_group": per_model_count(key("expert_group_used_count", 1), "expert_group_used_count")
        or 1,
        "topk_method": topk_method,
        "scoring_func": "sigmoid" if is_v3 else "softmax",
        "q_lora_rank": key("attention.q_lora_rank", None),
        "kv_lora_rank": key("attention.kv_lora_rank"),
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": int(key_length) - rope,
        "v_head_dim": int(value_length),
        "hidden_act": "silu",
        "attention_bias": False,
        "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "max_position_embeddings": key("context_length"),
    }
    rope_scaling = _deepseek_yarn(key)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    return config


def _deepseek_yarn(key: GGUFKey) -> dict[str, Any] | None:
    """HF yarn parameters from llama.cpp's `rope.scaling.*` keys of a `deepseek2` file.

    The converter stores `0.1 * mscale_all_dim` as `yarn_log_multiplier` and drops
    `mscale`; llama.cpp then computes with mscale = mscale_all_dim (llama-context.cpp), so
    that is what the config says (DeepSeek's releases have the two equal).
    """
    scaling_type = key("rope.scaling.type", "none")
    if scaling_type == "none":
        return None
    if scaling_type != "yarn":
        raise ValueError(
            f"unsupported deepseek2.rope.scaling.type {scaling_type!r}; supported: none, yarn"
        )
    for knob in ("attn_factor", "yarn_ext_factor", "yarn_attn_factor"):
        if key(f"rope.scaling.{knob}", None) is not None:
            raise ValueError(f"unsupported GGUF key 'deepseek2.rope.scaling.{knob}'")
    log_multiplier = key("rope.scaling.yarn_log_multiplier", None)
    if log_multiplier is None:
        raise ValueError(
            "unsupported deepseek2 yarn rope scaling without rope.scaling.yarn_log_multiplier"
        )
    mscale = float32_decimal(log_multiplier / 0.1)
    scaling: dict[str, Any] = {
        "rope_type": "yarn",
        "factor": key("rope.scaling.factor"),
        "original_max_position_embeddings": key("rope.scaling.original_context_length"),
        "mscale": mscale,
        "mscale_all_dim": mscale,
    }
    for knob in ("beta_fast", "beta_slow"):
        value = key(f"rope.scaling.yarn_{knob}", None)
        if value is not None:
            scaling[knob] = value
    return scaling


FAMILIES = (
    FamilySpec(
        name="deepseek",
        architectures=(DEEPSEEK_V2, DEEPSEEK_V3),
        definition="deepseek",
        gguf=(
            GGUFArchitecture(
                "deepseek2",
                DEEPSEEK_V2,
                {
                    "attn_norm.weight": BLOCK_TENSORS["attn_norm.weight"],
                    "ffn_norm.weight": BLOCK_TENSORS["ffn_norm.weight"],
                    **MLA_TENSORS,
                    **{k: BLOCK_TENSORS[k] for k in DENSE_FFN},
                    **routed_tensors("mlp", PROJECTIONS),
                    **shared_expert_tensors("mlp.shared_experts"),
                    "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
                },
                config_body=_gguf_config,
            ),
        ),
    ),
)
