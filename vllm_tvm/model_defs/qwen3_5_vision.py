"""Qwen3.5's vision transformer (transformers' `Qwen3_5VisionModel`) in `relax.nn`: pixel
patches of any number of images of any sizes -> the merged tokens (its `pooler_output`)
the text model reads in place of the image placeholders.

It is Qwen2.5-VL's tower (qwen2_5_vision.py: the patch embedding, the attention with its
2-D rotary, the segment-masked dense attention over all images at once) with these
differences, which is all this module holds:

- the patch embedding has a bias, and adds a learned position embedding: a square table
  bilinearly resampled to each image's grid; the host decides which four entries each patch
  mixes and with which weights (runtime/multimodal/learned_position_layout.py), in here
  the weighted sum of the gathered rows;
- no attention windows: every block attends within the frame, so the patches stay in the
  processor's order throughout;
- LayerNorms (with bias) instead of RMSNorms in the blocks and the merger, and a plain
  two-layer MLP (tanh GELU) instead of SwiGLU.

Parameter names equal the checkpoint's under `visual.` but for the patch kernel and its
bias (`patch_embed.proj` / `patch_embed.proj_bias` here, `.weight` / `.bias` there:
`qwen3_5_vision_weight_source`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from vllm_tvm.model_defs.layers import NTLinear
from vllm_tvm.model_defs.learned_positions import LayerNorm
from vllm_tvm.model_defs.qwen2_5_vision import (
    QwenVisionShape,
    VisionTowerParts,
    parse_vision_shape,
    segment_bias,
)

SUPPORTED_ACTIVATIONS = ("gelu_pytorch_tanh",)
LAYER_NORM_EPS = 1e-6
"""transformers' `Qwen3_5VisionBlock` and merger norms (fixed, not in the config)."""
QWEN3_5_VISION_DEFAULTS = {
    "depth": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_heads": 16,
    "out_hidden_size": 3584,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
}
"""`Qwen3_5VisionConfig`'s defaults."""
PATCH_KERNEL_SOURCES = {
    "patch_embed.proj": "patch_embed.proj.weight",
    "patch_embed.proj_bias": "patch_embed.proj.bias",
}


@dataclass(frozen=True, kw_only=True)
class Qwen3_5VisionConfig(QwenVisionShape):
    """Shape of Qwen3.5's vision tower (the HF `vision_config`)."""

    num_position_embeddings: int

    @property
    def position_grid_side(self) -> int:
        """Rows (and columns) of the learned position table."""
        return int(self.num_position_embeddings**0.5)


def parse_qwen3_5_vision_config(
    vision: dict[str, Any], refuse: type[Exception]
) -> Qwen3_5VisionConfig:
    """The HF `vision_config`; what the definition cannot run is refused by name."""
    config = Qwen3_5VisionConfig(
        **parse_vision_shape(vision, refuse, QWEN3_5_VISION_DEFAULTS, SUPPORTED_ACTIVATIONS),
        num_position_embeddings=int(vision.get("num_position_embeddings", 2304)),
    )
    if config.position_grid_side**2 != config.num_position_embeddings:
        raise refuse(
            f"unsupported vision_config.num_position_embeddings "
            f"{config.num_position_embeddings}: not a square table"
        )
    return config


def qwen3_5_vision_weight_source(param_name: str, prefix: str = "") -> str:
    """The checkpoint tensor of the tower's parameter `param_name` (both under `prefix`)."""
    local = param_name.removeprefix(prefix)
    return prefix + PATCH_KERNEL_SOURCES.get(local, local)


def _layer_norm(size: int, dtype: str) -> LayerNorm:
    """In fp32 whatever the dtype (TVM's layer_norm does not lower bfloat16)."""
    return LayerNorm(size, LAYER_NORM_EPS, dtype)


class VisionMLP(nn.Module):
    """linear_fc2(gelu_tanh(linear_fc1(x)))."""

    def __init__(self, config: Qwen3_5VisionConfig, dtype: str) -> None:
        hidden, inner = config.hidden_size, config.intermediate_size
        self.linear_fc1 = NTLinear(hidden, inner, True, dtype)
        self.linear_fc2 = NTLinear(inner, hidden, True, dtype)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.linear_fc2(op.gelu(self.linear_fc1(hidden), approximate="tanh"))


class Qwen3_5VisionTower(VisionTowerParts):
    """The tower over every patch of a prompt's images (module doc)."""

    def __init__(self, config: Qwen3_5VisionConfig, dtype: str) -> None:
        norm = partial(_layer_norm, dtype=dtype)
        mlp = partial(VisionMLP, config, dtype)
        super().__init__(config, dtype, norm, mlp, patch_bias=True)
        self.pos_embed = nn.Embedding(config.num_position_embeddings, config.hidden_size, dtype)

    def forward(
        self,
        patches: Tensor,
        patch_positions: Tensor,
        interpolation_indices: Tensor,
        interpolation_weights: Tensor,
        frame_segments: Tensor,
    ) -> Tensor:
        """`patches` [units, merge², patch width]; `patch_positions` [units, merge², 2];
        `interpolation_indices` / `interpolation_weights` [units, merge², 4];
        `frame_segments` [units, merge²] -> merged tokens [units, out_hidden]."""
        units, unit, taps = interpolation_indices.shape
        count = units * unit
        embedded = op.reshape(self.patch_embed(patches), (count, -1))
        table_rows = op.take(
            self.pos_embed.weight, op.reshape(interpolation_indices, (-1,)), axis=0
        )
        weights = op.reshape(interpolation_weights, (count, taps, 1)).astype(embedded.dtype)
        mixed = op.sum(op.reshape(table_rows, (count, taps, -1)) * weights, axis=1)
        hidden = embedded + mixed
        positions = op.permute_dims(op.reshape(patch_positions, (count, 2)), [1, 0])
        bias = segment_bias(op.reshape(frame_segments, (count,)))
        for block in self.blocks:
            hidden = block(hidden, positions, bias)
        return self.merger(hidden)
