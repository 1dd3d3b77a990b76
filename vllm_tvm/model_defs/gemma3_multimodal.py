"""Gemma 3 with its vision tower (`Gemma3ForConditionalGeneration`): the Llama-family
decoder plus an `encode_images` function that turns pixel values into the soft-token
embeddings the runtime puts in place of the image placeholder tokens.

Why one artifact: the encoder, its pooling and the multimodal projector are compiled by the
same TVM build as the decoder and read from the same checkpoint, so an artifact that
carries a vision tower is exactly one whose manifest lists `encode_images` and whose
runtime spec has a `vision` entry (compiler/runtime_spec.py). The projector
(transformers' `Gemma3MultiModalProjector`): the encoder's patch grid average-pooled down
to `mm_tokens_per_image` tokens, Gemma's (1 + w) RMSNorm, then a product with
`mm_input_projection_weight` ([vision hidden, text hidden], stored input-major).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.target import Target

from vllm_tvm.model_defs.config import (
    LlamaFamilyConfig,
    ModelConfigError,
    parse_llama_family_config,
)
from vllm_tvm.model_defs.layers import OffsetRMSNorm
from vllm_tvm.model_defs.llama import LlamaForCausalLM, fused_weight_sources
from vllm_tvm.model_defs.siglip import (
    SiglipVisionConfig,
    SiglipVisionTower,
    parse_siglip_vision_config,
)

ENCODE_IMAGES = "encode_images"
"""The exported encoder: pixel values [images, 3, H, W] -> [images, tokens, text hidden]."""

TEXT_TOWER_PREFIX = "language_model."
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.")
"""The checkpoint's tensor name prefixes (transformers' saved layout); the encoder's
parameter names equal them."""


@dataclass(frozen=True)
class Gemma3MultimodalConfig(LlamaFamilyConfig):
    """The decoder's config (the text config, Gemma 3's switches) plus its vision tower."""

    vision: SiglipVisionConfig | None = None
    mm_tokens_per_image: int = 256
    image_token_id: int = 262_144
    """The placeholder token each soft token replaces."""
    boi_token_id: int = 255_999
    eoi_token_id: int = 256_000

    @property
    def pooling_kernel(self) -> int:
        """Side of the average-pooling window over the encoder's patch grid."""
        assert self.vision is not None
        return self.vision.patches_per_side // math.isqrt(self.mm_tokens_per_image)


def parse_gemma3_multimodal_config(
    config: dict[str, Any], max_model_len: int | None = None
) -> Gemma3MultimodalConfig:
    """The text tower's config (parsed as a Gemma 3 decoder) and the SigLIP tower's."""
    text = parse_llama_family_config(config, max_model_len)
    vision = parse_siglip_vision_config(config.get("vision_config") or {}, ModelConfigError)
    tokens = int(config.get("mm_tokens_per_image", 256))
    side = math.isqrt(tokens)
    if side * side != tokens or vision.patches_per_side % side:
        raise ModelConfigError(
            f"unsupported mm_tokens_per_image {tokens}: must be a square whose side divides "
            f"the {vision.patches_per_side} patches per side of the vision tower"
        )
    fields = {name: getattr(text, name) for name in text.__dataclass_fields__}
    parsed = Gemma3MultimodalConfig(**fields, vision=vision, mm_tokens_per_image=tokens)
    return replace(
        parsed,
        image_token_id=int(config.get("image_token_index", config.get("image_token_id", 262_144))),
        boi_token_id=int(config.get("boi_token_index", config.get("boi_token_id", 255_999))),
        eoi_token_id=int(config.get("eoi_token_index", config.get("eoi_token_id", 256_000))),
    )


class Gemma3MultiModalProjector(nn.Module):
    """Average pooling of the patch grid, soft-embedding RMSNorm, projection to text width."""

    def __init__(self, config: Gemma3MultimodalConfig, dtype: str) -> None:
        assert config.vision is not None
        width = config.vision.hidden_size
        self.mm_input_projection_weight = nn.Parameter((width, config.hidden_size), dtype)
        self.mm_soft_emb_norm = OffsetRMSNorm(width, config.vision.layer_norm_eps, 1.0, dtype)
        self.side = config.vision.patches_per_side
        self.kernel = config.pooling_kernel
        self.width = width

    def forward(self, patches: Tensor) -> Tensor:
        images = patches.shape[0]
        pooled_side = self.side // self.kernel
        grid = op.reshape(
            patches, (images, pooled_side, self.kernel, pooled_side, self.kernel, self.width)
        )
        window_sum = op.sum(grid.astype("float32"), axis=[2, 4])
        pooled = (window_sum / float(self.kernel * self.kernel)).astype(patches.dtype)
        tokens = op.reshape(pooled, (images, pooled_side * pooled_side, self.width))
        return op.matmul(self.mm_soft_emb_norm(tokens), self.mm_input_projection_weight)


class Gemma3ForConditionalGeneration(LlamaForCausalLM):
    """The Gemma 3 decoder's contract (llama.py) plus `encode_images`."""

    def __init__(
        self,
        config: Gemma3MultimodalConfig,
        dtype: str,
        target: Target,
        attention: str = "tir",
    ) -> None:
        super().__init__(config, dtype, target, attention)
        assert config.vision is not None
        self.vision_tower = SiglipVisionTower(config.vision, dtype)
        self.multi_modal_projector = Gemma3MultiModalProjector(config, dtype)

    def encode_images(self, pixel_values: Tensor) -> Tensor:
        """pixel values [images, 3, H, W] -> soft-token embeddings [images, tokens, hidden]."""
        return self.multi_modal_projector(self.vision_tower(pixel_values))

    def export_spec(self) -> dict[str, Any]:
        vision = self.config.vision
        pixels = [vision.num_channels, vision.image_size, vision.image_size]
        encoder = {
            ENCODE_IMAGES: {
                "pixel_values": nn.spec.Tensor(["num_images", *pixels], self.dtype),
                "$": {"param_mode": "packed", "effect_mode": "none"},
            }
        }
        return {**super().export_spec(), **encoder}


def gemma3_multimodal_weight_sources(param_name: str) -> tuple[list[str], int]:
    """The vision tower's and projector's names are the checkpoint's; the decoder's are the
    Llama-family names under `language_model.`."""
    if param_name.startswith(VISION_PREFIXES):
        return [param_name], 0
    sources, axis = fused_weight_sources(param_name)
    return [TEXT_TOWER_PREFIX + source for source in sources], axis
