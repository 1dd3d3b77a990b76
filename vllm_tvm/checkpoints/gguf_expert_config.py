"""Checks shared by the GGUF config keys of expert models (llama.cpp's meaning of them).

Why apart: the routing facts (expert counts, gating function, weight scaling) are spelled
the same way in every expert architecture's metadata, and so are the ones the llama and
Qwen MoE graphs of llama.cpp would apply but HF's models lack. The family modules
(families/mixtral.py, qwen_moe.py, deepseek.py) build their configs with these.
"""

from __future__ import annotations

from typing import Any

from gguf import ExpertGatingFuncType

from vllm_tvm.checkpoints.family_spec import GGUFKey


def per_model_count(value: Any, name: str) -> int:
    """A per-model integer; llama.cpp also allows per-layer arrays, which we refuse."""
    if isinstance(value, list):
        raise ValueError(f"unsupported per-layer {name} {value}; supported: one value")
    return int(value)


def refuse_routing_keys(key: GGUFKey, arch: str) -> None:
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
