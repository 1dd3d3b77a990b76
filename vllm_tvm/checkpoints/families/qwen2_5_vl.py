"""Qwen2.5-VL (`Qwen2_5_VLForConditionalGeneration`): a Qwen2 decoder (q/k/v bias) whose
RoPE has three position streams (M-RoPE), and a windowed vision transformer; both run by
model_defs/qwen2_5_vl.py.

The decoder's config sits in `text_config` (transformers 5) or at the top level (the
released checkpoints, transformers 4); its RoPE is spelled `{"type": "mrope",
"mrope_section": [...]}` (released) or `rope_parameters` with `rope_type: default` and an
`mrope_section` (transformers 5). The decoder is parsed as plain RoPE (`mrope_rope`
returns the sections, which the definition applies on top).
"""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.family_spec import FamilySpec, ModelConfigError

QWEN2_5_VL = "Qwen2_5_VLForConditionalGeneration"
QWEN2_VL = "Qwen2VLForConditionalGeneration"
ROPE_KEYS = ("rope_parameters", "rope_scaling")
MROPE_SECTION = "mrope_section"


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config, its RoPE without the M-RoPE sections (read by `mrope_rope`)."""
    text = config.get("text_config")
    text = dict(text) if isinstance(text, dict) else dict(config)
    for key in ROPE_KEYS:
        rope = text.get(key)
        if isinstance(rope, dict):
            rope = {name: value for name, value in rope.items() if name != MROPE_SECTION}
            if rope.get("type") == "mrope":
                rope["type"] = "default"
            if rope.get("rope_type") == "mrope":
                rope["rope_type"] = "default"
            text[key] = rope
    return {**text, "architectures": [config["architectures"][0]]}


def mrope_section(config: dict[str, Any]) -> tuple[int, ...]:
    """The frequencies each of the three position streams (temporal, row, column) rotates."""
    text = config.get("text_config")
    text = text if isinstance(text, dict) else config
    for key in ROPE_KEYS:
        rope = text.get(key)
        if isinstance(rope, dict) and MROPE_SECTION in rope:
            section = tuple(int(x) for x in rope[MROPE_SECTION])
            if len(section) != 3:
                raise ModelConfigError(
                    f"unsupported {MROPE_SECTION} {list(section)}: three sections expected"
                )
            return section
    raise ModelConfigError(f"config.json of {QWEN2_5_VL} has no rope {MROPE_SECTION}")


def _options(
    config: dict[str, Any], rope_theta: float, local_theta: float | None
) -> dict[str, Any]:
    del config, rope_theta, local_theta
    return {"qkv_bias": True, "o_proj_bias": False}


FAMILIES = (
    FamilySpec(
        name="qwen2_5_vl",
        architectures=(QWEN2_5_VL,),
        definition="qwen2_5_vl",
        config_options=_options,
        text_config=_text_config,
        sliding_window_switch="use_sliding_window",
        refused={
            QWEN2_VL: "Qwen2-VL's vision tower (LayerNorm blocks with a QuickGELU MLP, no "
            "window attention)",
        },
    ),
)
