"""The description of a DeepSeek-V2 / V3 decoder: latent attention and grouped expert routing.

Why its own parser: DeepSeek configs share little with the llama family's (no head_dim of
the attention, q-LoRA and kv-LoRA ranks, group-limited routing, yarn RoPE with mscale on
the rotary part only). The dataclass extends `MoEConfig`, so the expert layer reads the
same routed-expert facts as for Mixtral and Qwen; what transformers does with each key is
what this module records (e.g. transformers 5 ignores V2's `norm_topk_prob`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vllm_tvm.checkpoints.families.deepseek import DEEPSEEK_V2, DEEPSEEK_V3
from vllm_tvm.model_defs.config import ModelConfigError
from vllm_tvm.model_defs.moe_config import MoEConfig

TOPK_METHODS = {
    DEEPSEEK_V2: ("greedy", "group_limited_greedy"),
    DEEPSEEK_V3: ("noaux_tc",),
}


@dataclass(frozen=True)
class DeepseekConfig(MoEConfig):
    """MLA attention facts and DeepSeek routing on top of the routed-expert facts."""

    q_lora_rank: int = 0
    """0: queries come from one `q_proj`; else `q_a_proj` -> RMSNorm -> `q_b_proj`."""
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    scoring: str = "softmax"
    """Router scores: `softmax` (V2) or `sigmoid` (V3, with e_score_correction_bias)."""
    topk_method: str = "greedy"
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    rope_interleave: bool = True
    """Rotary pairs are (2i, 2i+1) (DeepSeek's layout); False: (i, i + rope_dim / 2)."""
    rope_inv_freq: tuple[float, ...] = field(default_factory=tuple)
    rope_attention_factor: float = 1.0
    """cos/sin multiplier (yarn's mscale ratio)."""
    softmax_scale: float = 1.0

    @property
    def routes_by_group(self) -> bool:
        """Whether top-k is limited to the best `topk_group` of `n_group` expert groups."""
        return self.topk_method in ("group_limited_greedy", "noaux_tc")


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _rope(config: dict[str, Any], dim: int) -> tuple[np.ndarray, float, float]:
    """(inverse frequencies, cos/sin factor, softmax multiplier) as transformers computes them."""
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type") or params.get("type") or "default"
    exponents = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    pos_freqs = np.float32(theta) ** exponents
    if rope_type == "default":
        return (1.0 / pos_freqs).astype(np.float32), 1.0, 1.0
    if rope_type != "yarn":
        raise ModelConfigError(
            f"unsupported rope_scaling type '{rope_type}' for DeepSeek; supported: default, yarn"
        )
    factor = float(params["factor"])
    original = int(params["original_max_position_embeddings"])
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = (
            _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
            if mscale and mscale_all_dim
            else _yarn_mscale(factor)
        )
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation = (1 - ramp).astype(np.float32)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (
        1.0 / pos_freqs
    ) * extrapolation
    softmax_multiplier = _yarn_mscale(factor, mscale_all_dim) ** 2 if mscale_all_dim else 1.0
    return inv_freq.astype(np.float32), float(attention_factor), softmax_multiplier


def parse_deepseek_config(config: dict[str, Any]) -> DeepseekConfig:
    """Validate an HF config dict of DeepSeek-V2 / V3 and normalise it."""
    architecture = config["architectures"][0]
    if config.get("hidden_act", "silu") != "silu":
        raise ModelConfigError(f"unsupported hidden_act '{config['hidden_act']}'; supported: silu")
    method = config.get("topk_method") or TOPK_METHODS[architecture][0]
    if method not in TOPK_METHODS[architecture]:
        raise ModelConfigError(
            f"unsupported topk_method '{method}' for {architecture}; supported: "
            + ", ".join(TOPK_METHODS[architecture])
        )
    if config.get("attention_bias"):
        raise ModelConfigError(f"{architecture} with attention_bias is not supported")
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    nope, rope = int(config["qk_nope_head_dim"]), int(config["qk_rope_head_dim"])
    inv_freq, attention_factor, softmax_multiplier = _rope(config, rope)
    experts = int(config.get("n_routed_experts") or config.get("num_local_experts") or 0)
    top_k = int(config["num_experts_per_tok"])
    if experts < 1 or not 1 <= top_k <= experts:
        raise ModelConfigError(
            f"{architecture} needs 1 <= num_experts_per_tok <= experts; got {top_k} of {experts}"
        )
    first_dense = int(config.get("first_k_dense_replace", 0))
    is_v3 = architecture == DEEPSEEK_V3
    return DeepseekConfig(
        architecture=architecture,
        vocab_size=int(config["vocab_size"]),
        hidden_size=int(config["hidden_size"]),
        intermediate_size=int(config["intermediate_size"]),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=nope + rope,
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=float(
            (config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 1e4))
        ),
        max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        num_experts=experts,
        num_experts_per_tok=top_k,
        moe_intermediate_size=int(config["moe_intermediate_size"]),
        norm_topk_prob=is_v3 and bool(config.get("norm_topk_prob", True)),
        shared_expert_intermediate_size=int(config["moe_intermediate_size"])
        * int(config.get("n_shared_experts") or 0),
        sparse_layers=tuple(range(first_dense, layers)),
        q_lora_rank=int(config.get("q_lora_rank") or 0),
        kv_lora_rank=int(config["kv_lora_rank"]),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=int(config["v_head_dim"]),
        scoring="sigmoid" if is_v3 else "softmax",
        topk_method=method,
        n_group=int(config.get("n_group") or 1),
        topk_group=int(config.get("topk_group") or 1),
        routed_scaling_factor=float(config.get("routed_scaling_factor", 1.0)),
        rope_interleave=bool(config.get("rope_interleave", True)) if is_v3 else True,
        rope_inv_freq=tuple(float(f) for f in inv_freq),
        rope_attention_factor=attention_factor,
        softmax_scale=(nope + rope) ** -0.5 * softmax_multiplier,
    )
