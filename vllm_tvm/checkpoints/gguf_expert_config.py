"""HF config keys of expert models from a GGUF file's metadata (llama.cpp's meaning of them).

Why apart from gguf_config.py: the routing facts (expert counts and sizes, gating function,
renormalisation, scaling, groups, leading dense layers) are keys of their own, and where
llama.cpp fixes a behaviour per architecture instead of storing it, the HF config must say
what llama.cpp does: Qwen2-MoE never renormalises the chosen experts' weights, Qwen3-MoE
always does, and every layer of a `qwen2moe` / `qwen3moe` file routes. DeepSeek-V2/V3
(`deepseek2`) shares almost nothing with the llama-family keys (latent attention ranks and
head sizes, yarn with mscale), so its whole config is built here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from gguf import ExpertGatingFuncType

from vllm_tvm.checkpoints.gguf_expert_tensors import (
    DEEPSEEK_V3_ARCHITECTURE,
    EXPERT_ARCHITECTURES,
    MIXTRAL_ARCHITECTURE,
)
from vllm_tvm.checkpoints.gguf_reader import float32_decimal

Key = Callable[..., Any]
"""`key(name, default=MISSING)`: metadata key `{arch}.{name}`."""

_NORMALISED_TOP_K = {"qwen2moe": False, "qwen3moe": True}
"""llama.cpp's fixed choice per architecture (src/models/qwen2moe.cpp, qwen3moe.cpp)."""


def _count(value: Any, name: str) -> int:
    """A per-model integer; llama.cpp also allows per-layer arrays, which we refuse."""
    if isinstance(value, list):
        raise ValueError(f"unsupported per-layer {name} {value}; supported: one value")
    return int(value)


def _refuse_routing_keys(key: Key, arch: str) -> None:
    """Routing keys that llama.cpp's llama/qwen MoE graphs would apply and HF's do not have."""
    gating = key("expert_gating_func", None)
    if gating is not None and gating != ExpertGatingFuncType.SOFTMAX:
        raise ValueError(
            f"unsupported {arch}.expert_gating_func {gating}; supported: "
            f"{int(ExpertGatingFuncType.SOFTMAX)} (softmax)"
        )
    scale = key("expert_weights_scale", None)
    if scale not in (None, 0.0, 1.0):
        raise ValueError(f"unsupported {arch}.expert_weights_scale {scale}; supported: 1")


def expert_config(key: Key, arch: str, tensor_names: Collection[str]) -> dict[str, Any]:
    """What an expert model of a llama-family architecture adds to (or changes in) its HF
    config; nothing for a dense one. `tensor_names` are the file's GGUF tensor names."""
    experts = key("expert_count", None)
    if arch == "llama":
        if experts is None:
            if any(name.endswith("ffn_gate_inp.weight") for name in tensor_names):
                raise ValueError("GGUF llama file has expert tensors but no llama.expert_count")
            return {}
        _refuse_routing_keys(key, arch)
        return {
            "architectures": [MIXTRAL_ARCHITECTURE],
            "model_type": "mixtral",
            "num_local_experts": _count(experts, "expert_count"),
            "num_experts_per_tok": _count(key("expert_used_count"), "expert_used_count"),
        }
    if arch not in _NORMALISED_TOP_K:
        return {}
    _refuse_routing_keys(key, arch)
    config = {
        "model_type": "qwen2_moe" if arch == "qwen2moe" else "qwen3_moe",
        "num_experts": _count(experts, "expert_count"),
        "num_experts_per_tok": _count(key("expert_used_count"), "expert_used_count"),
        "moe_intermediate_size": _count(
            key("expert_feed_forward_length"), "expert_feed_forward_length"
        ),
        "norm_topk_prob": _NORMALISED_TOP_K[arch],
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }
    if arch == "qwen2moe":
        config["qkv_bias"] = "blk.0.attn_q.bias" in tensor_names
        config["shared_expert_intermediate_size"] = _count(
            key("expert_shared_feed_forward_length", 0), "expert_shared_feed_forward_length"
        )
    return config


def deepseek2_config(key: Key, vocab_size: int, tie_word_embeddings: bool) -> dict[str, Any]:
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
    groups = _count(key("expert_group_count", 1), "expert_group_count") or 1
    rope = _count(key("rope.dimension_count"), "rope.dimension_count")
    # llama.cpp's MLA files give the per-head sizes as *_mla keys (key_length is then the
    # latent + rope width of its MQA view); files before them give them as key/value_length.
    key_length = key("attention.key_length_mla", None) or key("attention.key_length")
    value_length = key("attention.value_length_mla", None) or key("attention.value_length")
    heads = _count(key("attention.head_count"), "attention.head_count")
    if is_v3:
        topk_method = "noaux_tc"
    else:
        topk_method = "group_limited_greedy" if groups > 1 else "greedy"
    config: dict[str, Any] = {
        "architectures": [DEEPSEEK_V3_ARCHITECTURE if is_v3 else EXPERT_ARCHITECTURES["deepseek2"]],
        "model_type": "deepseek_v3" if is_v3 else "deepseek_v2",
        "vocab_size": vocab_size,
        "tie_word_embeddings": tie_word_embeddings,
        "hidden_size": key("embedding_length"),
        "intermediate_size": _count(key("feed_forward_length"), "feed_forward_length"),
        "moe_intermediate_size": _count(
            key("expert_feed_forward_length"), "expert_feed_forward_length"
        ),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "n_routed_experts": _count(key("expert_count"), "expert_count"),
        "num_experts_per_tok": _count(key("expert_used_count"), "expert_used_count"),
        "n_shared_experts": _count(key("expert_shared_count", 0), "expert_shared_count"),
        "first_k_dense_replace": key("leading_dense_block_count", 0),
        "routed_scaling_factor": key("expert_weights_scale", 1.0),
        "norm_topk_prob": bool(key("expert_weights_norm", False)),
        "n_group": groups,
        "topk_group": _count(key("expert_group_used_count", 1), "expert_group_used_count") or 1,
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


def _deepseek_yarn(key: Key) -> dict[str, Any] | None:
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
