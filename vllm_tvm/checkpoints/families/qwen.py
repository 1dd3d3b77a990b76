"""Qwen2 and Qwen3: Llama with q/k/v bias (Qwen2, without saying so in its config) or
per-head q/k RMSNorm (Qwen3), and a sliding window that applies only when switched on."""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.families.llama import BLOCK_TENSORS, QK_NORM, QKV_BIAS
from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture

QWEN2 = "Qwen2ForCausalLM"
QWEN3 = "Qwen3ForCausalLM"
SLIDING_WINDOW_SWITCH = "use_sliding_window"
"""Qwen configs carry a `sliding_window` that applies only when this key is true."""


def _options(
    config: dict[str, Any], rope_theta: float, local_theta: float | None
) -> dict[str, Any]:
    del rope_theta, local_theta
    if config["architectures"][0] == QWEN2:
        return {"qkv_bias": True, "o_proj_bias": False}
    return {"qk_norm": True}


FAMILIES = (
    FamilySpec(
        name="qwen",
        architectures=(QWEN2, QWEN3),
        config_options=_options,
        sliding_window_switch=SLIDING_WINDOW_SWITCH,
        tensor_parallel=True,
        gguf=(
            GGUFArchitecture("qwen2", QWEN2, {**BLOCK_TENSORS, **QKV_BIAS}),
            GGUFArchitecture("qwen3", QWEN3, {**BLOCK_TENSORS, **QK_NORM}),
        ),
    ),
)
