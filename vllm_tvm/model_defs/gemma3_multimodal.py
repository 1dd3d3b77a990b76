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
from pathlib import Path
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache
from tvm.target import Target

from vllm_tvm.checkpoints.safetensors_weights import SafetensorsWeights
from vllm_tvm.model_defs.checkpoint_layout import CheckpointLayout
from vllm_tvm.model_defs.config import (
    LlamaFamilyConfig,
    ModelConfigError,
    parse_llama_family_config,
)
from vllm_tvm.model_defs.image_block_attention import ImageBlockAttention
from vllm_tvm.model_defs.layers import OffsetRMSNorm
from vllm_tvm.model_defs.llama import LlamaForCausalLM, fused_weight_sources
from vllm_tvm.model_defs.siglip import (
    SiglipVisionConfig,
    SiglipVisionTower,
    parse_siglip_vision_config,
)

ENCODE_IMAGES = "encode_images"
"""The exported encoder: pixel values [images, 3, H, W] -> [images, tokens, text hidden]."""
PREFILL_IMAGES = "prefill_images"
"""`prefill` with an attention bias [tokens, tokens] and the soft-token rows [tokens] after
the logit positions: one image's soft tokens attend to each other both ways
(image_block_attention.py)."""

TEXT_TOWER_PREFIX = "language_model."
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.")
"""The checkpoint's tensor name prefixes (transformers 5's saved layout); the encoder's
parameter names equal them."""
VISION_TOWER = "vision_tower."
RELEASED_VISION_TOWER = "vision_tower.vision_model."
"""The released checkpoints' (and transformers 4's) spelling of the vision tower's names."""


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

    owned_kv_ready = False

    def __init__(
        self,
        config: Gemma3MultimodalConfig,
        dtype: str,
        target: Target,
        attention: str = "tir",
    ) -> None:
        if config.rope_local_theta is None:
            # The dense image rows read q/k as the cache's attention does, so every layer
            # must rotate them in the model. Without a sliding-layer base of its own (e.g.
            # every layer full) the sliding base is the global one, which makes every
            # layer rotate itself; the cache then rotates nothing.
            config = replace(config, rope_local_theta=config.rope_theta)
        super().__init__(config, dtype, target, attention)
        assert config.vision is not None
        self.vision_tower = SiglipVisionTower(config.vision, dtype)
        self.multi_modal_projector = Gemma3MultiModalProjector(config, dtype)
        self.image_block_attention = ImageBlockAttention()
        for layer in self.model.layers:
            layer.self_attn.block_attention = self.image_block_attention

    def encode_images(self, pixel_values: Tensor) -> Tensor:
        """pixel values [images, 3, H, W] -> soft-token embeddings [images, tokens, hidden]."""
        return self.multi_modal_projector(self.vision_tower(pixel_values))

    def prefill_images(
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        attention_bias: Tensor,
        image_rows: Tensor,
        kv_cache: PagedKVCache,
    ) -> tuple[Tensor, PagedKVCache]:
        """`prefill` where the rows `image_rows` attend under `attention_bias`."""
        blocks = self.image_block_attention
        blocks.attention_bias, blocks.image_rows = attention_bias, image_rows
        try:
            return self.prefill(input_embed, logit_positions, kv_cache)
        finally:
            blocks.attention_bias = blocks.image_rows = None

    def export_spec(self) -> dict[str, Any]:
        vision = self.config.vision
        pixels = [vision.num_channels, vision.image_size, vision.image_size]
        spec = super().export_spec()
        prefill = spec["prefill"]
        image_prefill = {
            "input_embed": prefill["input_embed"],
            "logit_positions": prefill["logit_positions"],
            "attention_bias": nn.spec.Tensor(["seq_len", "seq_len"], "float32"),
            "image_rows": nn.spec.Tensor(["seq_len"], self.dtype),
            "kv_cache": prefill["kv_cache"],
            "$": prefill["$"],
        }
        encoder = {
            "pixel_values": nn.spec.Tensor(["num_images", *pixels], self.dtype),
            "$": prefill["$"],
        }
        return {**spec, PREFILL_IMAGES: image_prefill, ENCODE_IMAGES: encoder}


def gemma3_multimodal_weight_sources(param_name: str) -> tuple[list[str], int]:
    """The vision tower's and projector's names are the checkpoint's; the decoder's are the
    Llama-family names under `language_model.`."""
    if param_name.startswith(VISION_PREFIXES):
        return [param_name], 0
    sources, axis = fused_weight_sources(param_name)
    return [TEXT_TOWER_PREFIX + source for source in sources], axis


def checkpoint_layout(model_path: Path) -> CheckpointLayout:
    """The layout of the checkpoint at `model_path`: the vision tower under
    `vision_tower.vision_model.` when its tensors are named so (released checkpoints),
    else transformers 5's `vision_tower.`."""
    names = SafetensorsWeights(model_path).names() if Path(model_path).is_dir() else []
    if not any(name.startswith(RELEASED_VISION_TOWER) for name in names):
        return CheckpointLayout("transformers", gemma3_multimodal_weight_sources)

    def released(param_name: str) -> tuple[list[str], int]:
        if param_name.startswith(VISION_TOWER):
            return [RELEASED_VISION_TOWER + param_name.removeprefix(VISION_TOWER)], 0
        return gemma3_multimodal_weight_sources(param_name)

    return CheckpointLayout("released", released)
