"""Tiny random `Qwen2_5_VLForConditionalGeneration` and `Qwen3_5ForConditionalGeneration` /
`Qwen3_5MoeForConditionalGeneration` checkpoints (transformers' classes, tiny text and
vision configs: for Qwen2.5-VL 2 text layers with M-RoPE and a 3-block vision tower with one
full-attention block; for Qwen3.5 the hybrid test shape) with a tokenizer that knows Qwen's
vision tokens, and a preprocessor config whose pixel budget keeps images at a few
patches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tiny_models import BASE
from tiny_vlm import save_random_checkpoint, vision_tokenizer

VISION_TOKEN_STRINGS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
TEXT = {
    **BASE,
    "tie_word_embeddings": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3]},
}
VISION = {
    "depth": 3,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": BASE["hidden_size"],
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "window_size": 56,
    "fullatt_block_indexes": [1],
}
MIN_PIXELS = 28 * 28
MAX_PIXELS = 28 * 28 * 20
"""At most 20 soft tokens an image."""
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyQwenVLM:
    path: Path
    vision_start_token_id: int
    vision_end_token_id: int
    image_token_id: int


def qwen2_5_vlm_checkpoint(path: Path) -> TinyQwenVLM:
    """Config, weights, tokenizer (the vision tokens added as specials) and Qwen2-VL's
    preprocessor config."""
    import transformers

    vocab, (start, end, image, video) = vision_tokenizer(path, VISION_TOKEN_STRINGS)
    config = transformers.Qwen2_5_VLConfig(
        text_config={**TEXT, "vocab_size": vocab},
        vision_config=VISION,
        image_token_id=image,
        video_token_id=video,
        vision_start_token_id=start,
        vision_end_token_id=end,
        tie_word_embeddings=False,
    )
    preprocessor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "min_pixels": MIN_PIXELS,
        "max_pixels": MAX_PIXELS,
        "patch_size": VISION["patch_size"],
        "merge_size": VISION["spatial_merge_size"],
        "temporal_patch_size": VISION["temporal_patch_size"],
    }
    save_random_checkpoint(
        lambda: transformers.Qwen2_5_VLForConditionalGeneration(config),
        path,
        preprocessor,
        CHAT_TEMPLATE,
    )
    return TinyQwenVLM(path, start, end, image)


QWEN3_5_TEXT_ROPE = {
    "rope_type": "default",
    "rope_theta": 10_000.0,
    "partial_rotary_factor": 0.25,
    "mrope_section": [2, 1, 1],
}
"""head_dim 32 rotates its first 8 channels: 4 frequencies, interleaved T H W T."""
QWEN3_5_VISION = {
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 16,
}
QWEN3_5_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "size": {"shortest_edge": 32 * 32, "longest_edge": 32 * 32 * 20},
    "patch_size": 16,
    "merge_size": 2,
    "temporal_patch_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
"""The released Qwen3.5 preprocessor's keys and values (but the pixel budget: at most 20
soft tokens an image)."""


def qwen3_5_vlm_checkpoint(path: Path, moe: bool = False) -> TinyQwenVLM:
    """A tiny `Qwen3_5ForConditionalGeneration` (`Qwen3_5MoeForConditionalGeneration` with
    `moe`): the hybrid test shape (2 Gated DeltaNet + 2 gated full-attention layers) with
    M-RoPE, a 2-block vision tower with a 4 x 4 position table; Qwen's vision tokens."""
    import transformers
    from hybrid_checkpoints import EXPERTS, SHAPE

    vocab, (start, end, image, video) = vision_tokenizer(path, VISION_TOKEN_STRINGS)
    text = {**SHAPE, "head_dim": 32, "vocab_size": vocab, "rope_parameters": QWEN3_5_TEXT_ROPE}
    vision = {**QWEN3_5_VISION, "out_hidden_size": SHAPE["hidden_size"]}
    config_class, model_class = (
        (transformers.Qwen3_5MoeConfig, transformers.Qwen3_5MoeForConditionalGeneration)
        if moe
        else (transformers.Qwen3_5Config, transformers.Qwen3_5ForConditionalGeneration)
    )
    config = config_class(
        text_config={**text, **EXPERTS} if moe else text,
        vision_config=vision,
        image_token_id=image,
        video_token_id=video,
        vision_start_token_id=start,
        vision_end_token_id=end,
        tie_word_embeddings=False,
    )
    save_random_checkpoint(lambda: model_class(config), path, QWEN3_5_PREPROCESSOR, CHAT_TEMPLATE)
    return TinyQwenVLM(path, start, end, image)
