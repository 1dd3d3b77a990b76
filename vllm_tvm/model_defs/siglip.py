"""SigLIP's vision transformer (transformers' `SiglipVisionModel` without its pooling head):
the image encoder of Gemma 3, in `relax.nn`.

Why its own module: the encoder is a plain pre-norm ViT over fixed-size images (patch
embedding, learned position embedding, LayerNorm + dense bidirectional attention + GELU MLP
per layer, a final LayerNorm) and shares nothing with the paged decoders but `NTLinear`.
The patch embedding, a stride-`patch` convolution in the checkpoint, is computed as the
product of each flattened patch with the convolution kernel read as `[hidden, 3 * p * p]`
(the same numbers; no convolution kernel to schedule). Parameter names equal the HF names
under `vision_tower.`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from vllm_tvm.model_defs.layers import NTLinear, nt_matmul

SUPPORTED_VISION_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu")


@dataclass(frozen=True)
class SiglipVisionConfig:
    """Shape of a SigLIP vision tower (the HF `vision_config`)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    image_size: int
    patch_size: int
    num_channels: int = 3
    layer_norm_eps: float = 1e-6
    hidden_act: str = "gelu_pytorch_tanh"

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class SiglipEmbeddings(nn.Module):
    """Patch embedding (the convolution as a product) plus the learned position embedding."""

    def __init__(self, config: SiglipVisionConfig, dtype: str) -> None:
        self.config = config
        patch = config.patch_size
        self.patch_embedding = _PatchConvolution(config, dtype)
        self.position_embedding = nn.Embedding(
            config.patches_per_side**2, config.hidden_size, dtype=dtype
        )
        self.patch_width = config.num_channels * patch * patch

    def forward(self, pixel_values: Tensor) -> Tensor:
        """[images, channels, H, W] -> [images, patches, hidden] (patches in row-major order)."""
        cfg = self.config
        images = pixel_values.shape[0]
        side, patch = cfg.patches_per_side, cfg.patch_size
        grid = op.reshape(pixel_values, (images, cfg.num_channels, side, patch, side, patch))
        patches = op.reshape(
            op.permute_dims(grid, [0, 2, 4, 1, 3, 5]), (images, side * side, self.patch_width)
        )
        positions = op.reshape(self.position_embedding.weight, (1, side * side, cfg.hidden_size))
        return self.patch_embedding(patches) + positions


class _PatchConvolution(nn.Module):
    """The checkpoint's `patch_embedding` convolution (weight [hidden, channels, p, p], bias)
    applied to flattened patches [.., channels * p * p]."""

    def __init__(self, config: SiglipVisionConfig, dtype: str) -> None:
        patch = config.patch_size
        self.weight = nn.Parameter((config.hidden_size, config.num_channels, patch, patch), dtype)
        self.bias = nn.Parameter((config.hidden_size,), dtype)
        self.hidden_size = config.hidden_size
        self.patch_width = config.num_channels * patch * patch

    def forward(self, patches: Tensor) -> Tensor:
        kernel = op.reshape(self.weight, (self.hidden_size, self.patch_width))
        return nt_matmul(patches, kernel) + self.bias


class FloatLayerNorm(nn.Module):
    """LayerNorm (weight and bias in the model's dtype) computed in fp32: TVM 0.27 legalizes
    `layer_norm` for float32 and float16 only, and bfloat16 models need it too."""

    def __init__(self, size: int, eps: float, dtype: str) -> None:
        self.weight = nn.Parameter((size,), dtype)
        self.bias = nn.Parameter((size,), dtype)
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        normed = op.layer_norm(
            x.astype("float32"),
            normalized_shape=x.shape[-1],
            weight=self.weight.astype("float32"),
            bias=self.bias.astype("float32"),
            eps=self.eps,
        )
        return normed.astype(x.dtype)


class SiglipAttention(nn.Module):
    """Dense multi-head attention among one image's patches (no mask, no rotary)."""

    def __init__(self, config: SiglipVisionConfig, dtype: str) -> None:
        hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.q_proj = NTLinear(hidden, hidden, True, dtype)
        self.k_proj = NTLinear(hidden, hidden, True, dtype)
        self.v_proj = NTLinear(hidden, hidden, True, dtype)
        self.out_proj = NTLinear(hidden, hidden, True, dtype)

    def forward(self, hidden: Tensor) -> Tensor:
        images, patches, width = hidden.shape

        def heads_first(x: Tensor) -> Tensor:
            split = op.reshape(x, (images, patches, self.heads, self.head_dim))
            return op.permute_dims(split, [0, 2, 1, 3])

        q = heads_first(self.q_proj(hidden))
        k = heads_first(self.k_proj(hidden))
        v = heads_first(self.v_proj(hidden))
        scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2]), out_dtype="float32")
        weights = op.softmax(scores * (self.head_dim**-0.5), axis=-1).astype(v.dtype)
        attended = op.permute_dims(op.matmul(weights, v), [0, 2, 1, 3])
        return self.out_proj(op.reshape(attended, (images, patches, width)))


class SiglipMLP(nn.Module):
    def __init__(self, config: SiglipVisionConfig, dtype: str) -> None:
        self.fc1 = NTLinear(config.hidden_size, config.intermediate_size, True, dtype)
        self.fc2 = NTLinear(config.intermediate_size, config.hidden_size, True, dtype)
        self.approximate = "tanh" if config.hidden_act == "gelu_pytorch_tanh" else "none"

    def forward(self, hidden: Tensor) -> Tensor:
        return self.fc2(op.gelu(self.fc1(hidden), approximate=self.approximate))


class SiglipEncoderLayer(nn.Module):
    """Pre-norm block: x + attn(LN1(x)), then x + mlp(LN2(x))."""

    def __init__(self, config: SiglipVisionConfig, dtype: str) -> None:
        eps = config.layer_norm_eps
        self.layer_norm1 = FloatLayerNorm(config.hidden_size, eps, dtype)
        self.self_attn = SiglipAttention(config, dtype)
        self.layer_norm2 = FloatLayerNorm(config.hidden_size, eps, dtype)
        self.mlp = SiglipMLP(config, dtype)

    def forward(self, hidden: Tensor) -> Tensor:
        hidden = hidden + self.self_attn(self.layer_norm1(hidden))
        return hidden + self.mlp(self.layer_norm2(hidden))


class SiglipEncoder(nn.Module):
    def __init__(self, config: SiglipVisionConfig, dtype: str) -> None:
        self.layers = nn.ModuleList(
            [SiglipEncoderLayer(config, dtype) for _ in range(config.num_hidden_layers)]
        )

    def forward(self, hidden: Tensor) -> Tensor:
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


class SiglipVisionTower(nn.Module):
    """pixel values [images, 3, H, W] -> the last hidden state [images, patches, hidden]."""

    def __init__(self, config: SiglipVisionConfig, dtype: str) -> None:
        self.embeddings = SiglipEmbeddings(config, dtype)
        self.encoder = SiglipEncoder(config, dtype)
        self.post_layernorm = FloatLayerNorm(config.hidden_size, config.layer_norm_eps, dtype)

    def forward(self, pixel_values: Tensor) -> Tensor:
        return self.post_layernorm(self.encoder(self.embeddings(pixel_values)))


def parse_siglip_vision_config(
    vision: dict[str, Any], refuse: type[Exception]
) -> SiglipVisionConfig:
    """The HF `vision_config` of a SigLIP tower; what the definition cannot run is refused by
    name with `refuse`."""
    act = vision.get("hidden_act", "gelu_pytorch_tanh")
    if act not in SUPPORTED_VISION_ACTIVATIONS:
        raise refuse(
            f"unsupported vision_config.hidden_act '{act}'; supported: "
            + ", ".join(SUPPORTED_VISION_ACTIVATIONS)
        )
    config = SiglipVisionConfig(
        hidden_size=int(vision.get("hidden_size", 768)),
        intermediate_size=int(vision.get("intermediate_size", 3072)),
        num_hidden_layers=int(vision.get("num_hidden_layers", 12)),
        num_attention_heads=int(vision.get("num_attention_heads", 12)),
        image_size=int(vision.get("image_size", 224)),
        patch_size=int(vision.get("patch_size", 16)),
        num_channels=int(vision.get("num_channels", 3)),
        layer_norm_eps=float(vision.get("layer_norm_eps", 1e-6)),
        hidden_act=act,
    )
    if config.image_size % config.patch_size or config.hidden_size % config.num_attention_heads:
        raise refuse(
            f"unsupported vision_config: image_size {config.image_size} must be a multiple of "
            f"patch_size {config.patch_size} and hidden_size {config.hidden_size} of "
            f"num_attention_heads {config.num_attention_heads}"
        )
    return config
