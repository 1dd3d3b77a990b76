"""Qwen2.5-VL's vision transformer (transformers' `Qwen2_5_VisionTransformerPretrainedModel`)
in `relax.nn`: pixel patches of any number of images of any sizes -> the merged tokens the
text model reads in place of the image placeholders.

Why this shape: the tower runs over the patches of all images of a prompt at once, as one
sequence; which patch may attend to which is data, not shape. The host (the runtime's
runtime/multimodal/patch_merge_layout.py, from each image's patch grid) hands in

- the patches grouped by merge unit (the 2x2 patches that become one text token), as the
  image processor orders them: `[units, merge², C * T * P * P]`;
- each patch's (row, column) in its image, for the 2-D rotary;
- `window_index`: the order of the merge units when grouped by attention window (a window
  is `window_size` pixels square), and its inverse;
- per patch (in window order) the image it belongs to and the window it belongs to.

In here: the patch embedding (the checkpoint's Conv3d over [T, P, P] with stride equal to
its kernel is the product of each flattened patch with the kernel read as
`[hidden, C * T * P * P]`), the reordering into window order, the blocks (RMSNorm, fused
qkv with the 2-D rotary, attention within the image on `fullatt_block_indexes` and within
the window elsewhere, RMSNorm, SwiGLU with biases), the patch merger (RMSNorm `ln_q`, the
merge unit's patches side by side, Linear, exact GELU, Linear) and the inverse reordering;
the blocks, the attention, the patch embedding and the merger serve Qwen3.5's tower too
(qwen3_5_vision.py).
Attention is a dense product masked by the segment ids (an image's patches only see their
image, or their window), which is exact and keeps images apart however many there are.
Parameter names equal the checkpoint's under `visual.` but for the merger's (`ln_q`,
`mlp.0`, `mlp.2` are `norm`, `linear_fc1`, `linear_fc2` here, Qwen3.5's names:
qwen2_5_vl.py maps them) and the patch kernel's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from tvm import te, tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from vllm_tvm.model_defs.layers import NTLinear, nt_matmul
from vllm_tvm.model_defs.rotary import apply_sectioned_rotary

MASKED = -1e30
"""Attention bias of a key in another image or window (exp underflows to 0 in fp32)."""
SUPPORTED_VISION_ACTIVATIONS = ("silu",)


@dataclass(frozen=True, kw_only=True)
class QwenVisionShape:
    """What the Qwen vision towers (2.5-VL's and 3.5's) share in their HF `vision_config`."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    in_channels: int = 3
    rope_theta: float = 10_000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def merge_unit(self) -> int:
        """Patches per text token."""
        return self.spatial_merge_size**2

    @property
    def patch_width(self) -> int:
        """Values of one flattened patch (channels x temporal patch x patch x patch)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2


@dataclass(frozen=True, kw_only=True)
class QwenVisionConfig(QwenVisionShape):
    """Shape of Qwen2.5-VL's vision tower (the HF `vision_config`)."""

    window_size: int
    fullatt_block_indexes: tuple[int, ...]
    rms_norm_eps: float = 1e-6


def parse_vision_shape(
    vision: dict[str, Any],
    refuse: type[Exception],
    defaults: dict[str, int],
    activations: tuple[str, ...],
) -> dict[str, Any]:
    """The `QwenVisionShape` fields of the HF `vision_config` (absent ones from `defaults`,
    the HF config class's defaults); an activation not in `activations`, a rotary other than
    axial or heads the 2-D rotary cannot split are refused by name."""
    act = vision.get("hidden_act", activations[0])
    if act not in activations:
        raise refuse(
            f"unsupported vision_config.hidden_act '{act}'; supported: " + ", ".join(activations)
        )
    rope = vision.get("rope_parameters") or {}
    if rope.get("rope_type", "axial") != "axial":
        raise refuse(f"unsupported vision_config rope_type '{rope['rope_type']}'; supported: axial")
    fields: dict[str, Any] = {
        name: int(vision.get(name, value)) for name, value in defaults.items()
    }
    fields["in_channels"] = int(vision.get("in_channels", 3))
    fields["rope_theta"] = float(rope.get("rope_theta", 10_000.0))
    hidden, heads = fields["hidden_size"], fields["num_heads"]
    if hidden % heads or (hidden // heads) % 4:
        raise refuse(
            f"unsupported vision_config: hidden_size {hidden} must split into "
            f"num_heads {heads} heads of a multiple of 4 channels"
        )
    return fields


QWEN2_5_VISION_DEFAULTS = {
    "depth": 32,
    "hidden_size": 3584,
    "intermediate_size": 3420,
    "num_heads": 16,
    "out_hidden_size": 3584,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
}
"""`Qwen2_5_VLVisionConfig`'s defaults."""


def parse_qwen_vision_config(vision: dict[str, Any], refuse: type[Exception]) -> QwenVisionConfig:
    """The HF `vision_config`; what the definition cannot run is refused by name."""
    config = QwenVisionConfig(
        **parse_vision_shape(vision, refuse, QWEN2_5_VISION_DEFAULTS, SUPPORTED_VISION_ACTIVATIONS),
        window_size=int(vision.get("window_size", 112)),
        fullatt_block_indexes=tuple(
            int(i) for i in vision.get("fullatt_block_indexes", (7, 15, 23, 31))
        ),
    )
    if config.window_size % (config.patch_size * config.spatial_merge_size):
        raise refuse(
            f"unsupported vision_config.window_size {config.window_size}: not a multiple of "
            f"patch_size x spatial_merge_size"
        )
    return config


def _segment_bias(segments: te.Tensor) -> te.Tensor:
    """[n, n] fp32: 0 where the two patches share a segment, MASKED elsewhere."""
    count = segments.shape[0]
    return te.compute(
        (count, count),
        lambda i, j: tirx.Select(
            segments[i] == segments[j], tirx.const(0.0, "float32"), tirx.const(MASKED, "float32")
        ),
        name="segment_bias",
    )


def segment_bias(segments: Tensor) -> Tensor:
    return op.tensor_expr_op(_segment_bias, "segment_bias", [segments])


class VisionAttention(nn.Module):
    """Multi-head attention (fused qkv with bias, 2-D rotary) under an additive bias."""

    def __init__(self, config: QwenVisionShape, dtype: str) -> None:
        hidden = config.hidden_size
        self.heads = config.num_heads
        self.head_dim = config.head_dim
        self.qkv = NTLinear(hidden, 3 * hidden, True, dtype)
        self.proj = NTLinear(hidden, hidden, True, dtype)
        quarter = self.head_dim // 4
        exponents = np.arange(0, 2 * quarter, 2, dtype=np.float64) / (2 * quarter)
        row_col = (1.0 / config.rope_theta**exponents).astype(np.float32)
        self.inv_freq = np.concatenate([row_col, row_col])
        """The row frequencies, then the same ones for the column (transformers' axial)."""
        self.sections = (quarter, quarter)

    def forward(self, hidden: Tensor, positions: Tensor, bias: Tensor) -> Tensor:
        """`hidden` [n, width]; `positions` [2, n] (row, column); `bias` [n, n]."""
        count, width = hidden.shape
        qkv = op.reshape(self.qkv(hidden), (1, count, 3 * self.heads, self.head_dim))
        qkv = apply_sectioned_rotary(qkv, positions, self.inv_freq, self.sections, 2 * self.heads)
        q, k, v = (
            op.permute_dims(part, [0, 2, 1, 3]) for part in op.split(qkv, 3, axis=2)
        )  # [1, heads, n, d]
        scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2]), out_dtype="float32")
        weights = op.softmax(scores * (self.head_dim**-0.5) + bias, axis=-1).astype(v.dtype)
        attended = op.permute_dims(op.matmul(weights, v), [0, 2, 1, 3])
        return self.proj(op.reshape(attended, (count, width)))


class VisionMLP(nn.Module):
    """SwiGLU with biases: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: QwenVisionConfig, dtype: str) -> None:
        hidden, inner = config.hidden_size, config.intermediate_size
        self.gate_proj = NTLinear(hidden, inner, True, dtype)
        self.up_proj = NTLinear(hidden, inner, True, dtype)
        self.down_proj = NTLinear(inner, hidden, True, dtype)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.down_proj(op.silu(self.gate_proj(hidden)) * self.up_proj(hidden))


def _rms_norm(size: int, config: QwenVisionConfig, dtype: str) -> nn.RMSNorm:
    return nn.RMSNorm(size, -1, config.rms_norm_eps, bias=False, dtype=dtype)


NormFactory = Callable[[int], nn.Module]
"""A norm over the last axis of the given width (the tower's RMSNorm or LayerNorm)."""


class VisionBlock(nn.Module):
    """x + attn(norm1(x)), then x + mlp(norm2(x)); the towers differ in the norm and MLP."""

    def __init__(
        self, config: QwenVisionShape, dtype: str, make_norm: NormFactory, mlp: nn.Module
    ) -> None:
        self.norm1 = make_norm(config.hidden_size)
        self.attn = VisionAttention(config, dtype)
        self.norm2 = make_norm(config.hidden_size)
        self.mlp = mlp

    def forward(self, hidden: Tensor, positions: Tensor, bias: Tensor) -> Tensor:
        hidden = hidden + self.attn(self.norm1(hidden), positions, bias)
        return hidden + self.mlp(self.norm2(hidden))


class PatchMerger(nn.Module):
    """A norm per patch, the merge unit's patches side by side, then Linear-GELU-Linear.
    The names are Qwen3.5's checkpoint's (Qwen2.5-VL's `ln_q`, `mlp.0`, `mlp.2`:
    qwen2_5_vl.py maps them)."""

    def __init__(self, config: QwenVisionShape, dtype: str, make_norm: NormFactory) -> None:
        merged = config.hidden_size * config.merge_unit
        self.norm = make_norm(config.hidden_size)
        self.linear_fc1 = NTLinear(merged, merged, True, dtype)
        self.linear_fc2 = NTLinear(merged, config.out_hidden_size, True, dtype)
        self.merged = merged

    def forward(self, hidden: Tensor) -> Tensor:
        """[n, hidden] -> [n / merge unit, out_hidden]."""
        units = op.reshape(self.norm(hidden), (-1, self.merged))
        return self.linear_fc2(op.gelu(self.linear_fc1(units)))


class PatchEmbed(nn.Module):
    """The checkpoint's Conv3d kernel [hidden, C, T, P, P] over flattened patches, plus its
    bias where the checkpoint has one (Qwen3.5's)."""

    def __init__(self, config: QwenVisionShape, dtype: str, bias: bool = False) -> None:
        patch, frames = config.patch_size, config.temporal_patch_size
        self.proj = nn.Parameter(
            (config.hidden_size, config.in_channels, frames, patch, patch), dtype
        )
        self.proj_bias = nn.Parameter((config.hidden_size,), dtype) if bias else None
        self.hidden_size = config.hidden_size
        self.patch_width = config.patch_width

    def forward(self, patches: Tensor) -> Tensor:
        kernel = op.reshape(self.proj, (self.hidden_size, self.patch_width))
        embedded = nt_matmul(patches, kernel)
        return embedded if self.proj_bias is None else embedded + self.proj_bias


class VisionTowerParts(nn.Module):
    """What both towers hold: the patch embedding, `depth` blocks (each with its own norms
    and MLP) and the merger."""

    def __init__(
        self,
        config: QwenVisionShape,
        dtype: str,
        make_norm: NormFactory,
        make_mlp: Callable[[], nn.Module],
        patch_bias: bool = False,
    ) -> None:
        self.config = config
        self.patch_embed = PatchEmbed(config, dtype, patch_bias)
        self.blocks = nn.ModuleList(
            [VisionBlock(config, dtype, make_norm, make_mlp()) for _ in range(config.depth)]
        )
        self.merger = PatchMerger(config, dtype, make_norm)


class QwenVisionTower(VisionTowerParts):
    """The tower over every patch of a prompt's images (module doc)."""

    config: QwenVisionConfig

    def __init__(self, config: QwenVisionConfig, dtype: str) -> None:
        norm = partial(_rms_norm, config=config, dtype=dtype)
        super().__init__(config, dtype, norm, partial(VisionMLP, config, dtype))

    def forward(
        self,
        patches: Tensor,
        patch_positions: Tensor,
        window_index: Tensor,
        reverse_index: Tensor,
        image_segments: Tensor,
        window_segments: Tensor,
    ) -> Tensor:
        """`patches` [units, merge², patch width]; `patch_positions` [units, merge², 2];
        `window_index` / `reverse_index` [units]; `image_segments` / `window_segments`
        [units, merge²] (window order) -> merged tokens [units, out_hidden] in the
        processor's order."""
        cfg = self.config
        units, unit = patches.shape[0], cfg.merge_unit
        embedded = self.patch_embed(patches)  # [units, merge², hidden]
        hidden = op.reshape(op.take(embedded, window_index, axis=0), (units * unit, -1))
        ordered = op.reshape(op.take(patch_positions, window_index, axis=0), (units * unit, 2))
        positions = op.permute_dims(ordered, [1, 0])  # [2, n]: rows, then columns
        full_bias = segment_bias(op.reshape(image_segments, (units * unit,)))
        window_bias = segment_bias(op.reshape(window_segments, (units * unit,)))
        for index, block in enumerate(self.blocks):
            bias = full_bias if index in cfg.fullatt_block_indexes else window_bias
            hidden = block(hidden, positions, bias)
        return op.take(self.merger(hidden), reverse_index, axis=0)
