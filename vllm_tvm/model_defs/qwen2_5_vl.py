"""Qwen2.5-VL (`Qwen2_5_VLForConditionalGeneration`): the Qwen2 decoder with M-RoPE, plus
`encode_images` (qwen2_5_vision.py) and `prefill_images`, the prefill at explicit 3-D
positions.

Where the rotation happens, and why: TVM's paged KV cache rotates q/k at one position per
token (its own count of the sequence's tokens). M-RoPE rotates each frequency section by
its own stream (temporal, row, column): an image token's streams differ, and the text
after an image sits at `index + rope_delta` (transformers' `get_rope_index`: an image of
t x h x w merged tokens advances the positions by max(h, w) only). So this definition
rotates q/k itself in every layer and creates the cache with `RopeMode.NONE`
(rotary.py; k is stored rotated, as the cache would store it):

- `prefill` / `decode` (no image in the forward, every row at its cache position): the
  three streams are equal, and M-RoPE at equal streams is the plain rotation at that
  position, so they rotate at the cache's query positions (text-only requests run
  exactly as Qwen2's);
- `prefill_images` takes the positions `[3, tokens]` the runtime computed
  (runtime/multimodal/patch_merge_layout.py): the runtime runs every forward that holds a
  sequence with images through it, its decode rows as one-token chunks at
  `index + rope_delta`.

The causal mask is the cache's as always (transformers' Qwen2.5-VL attends causally over
image tokens too). Checkpoint names: the decoder under `model.` and `lm_head.`, the vision
tower under `visual.` (what transformers 5 saves, and the released checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache, RopeMode
from tvm.target import Target

from vllm_tvm.checkpoints.families.qwen2_5_vl import mrope_section
from vllm_tvm.model_defs.config import (
    LlamaFamilyConfig,
    ModelConfigError,
    parse_llama_family_config,
)
from vllm_tvm.model_defs.gemma3_multimodal import ENCODE_IMAGES, PREFILL_IMAGES
from vllm_tvm.model_defs.llama import LlamaForCausalLM, fused_weight_sources
from vllm_tvm.model_defs.qwen2_5_vision import (
    QwenVisionConfig,
    QwenVisionShape,
    QwenVisionTower,
    parse_qwen_vision_config,
)
from vllm_tvm.model_defs.rope_scaling import rope_frequencies
from vllm_tvm.model_defs.rotary import SectionedPositions

VISION_PREFIX = "visual."
MERGER_NAMES = {
    "visual.merger.norm.": "visual.merger.ln_q.",
    "visual.merger.linear_fc1.": "visual.merger.mlp.0.",
    "visual.merger.linear_fc2.": "visual.merger.mlp.2.",
}
"""The merger's `nn.Sequential` indices in the checkpoint."""
PATCH_KERNEL = "visual.patch_embed.proj"


@dataclass(frozen=True)
class Qwen2_5_VLConfig(LlamaFamilyConfig):
    """The decoder's config plus M-RoPE's sections, the vision tower and the image tokens."""

    vision: QwenVisionConfig | None = None
    mrope_section: tuple[int, ...] = (16, 24, 24)
    image_token_id: int = 151_655
    vision_start_token_id: int = 151_652
    vision_end_token_id: int = 151_653


def parse_qwen2_5_vl_config(
    config: dict[str, Any], max_model_len: int | None = None
) -> Qwen2_5_VLConfig:
    """The decoder (a Qwen2 with default RoPE), its M-RoPE sections and the vision tower."""
    text = parse_llama_family_config(config, max_model_len)
    if text.rope_type != "default":
        raise ModelConfigError(
            f"unsupported rope type '{text.rope_type}' with M-RoPE; supported: default"
        )
    vision = parse_qwen_vision_config(config.get("vision_config") or {}, ModelConfigError)
    return with_vision(Qwen2_5_VLConfig, text, config, mrope_section(config), vision)


IMAGE_TOKEN_KEYS = ("image_token_id", "vision_start_token_id", "vision_end_token_id")
MultimodalConfig = TypeVar("MultimodalConfig", bound=LlamaFamilyConfig)


def with_vision(
    record: type[MultimodalConfig],
    text: LlamaFamilyConfig,
    config: dict[str, Any],
    section: tuple[int, ...],
    vision: QwenVisionShape,
) -> MultimodalConfig:
    """`text`'s fields as `record` (a Qwen multimodal config: `vision`, `mrope_section` and
    the image tokens) with the M-RoPE `section`, the tower and `config`'s image tokens (the
    record's defaults where it names none); sections that do not cover the rotary
    frequencies and a tower of another width than the text are refused by name."""
    if sum(section) * 2 != text.rotary_dim:
        raise ModelConfigError(
            f"unsupported mrope_section {list(section)}: its sum must be half the rotary "
            f"dimension {text.rotary_dim}"
        )
    if vision.out_hidden_size != text.hidden_size:
        raise ModelConfigError(
            f"vision_config.out_hidden_size {vision.out_hidden_size} differs from the text "
            f"hidden_size {text.hidden_size}"
        )
    fields = {name: getattr(text, name) for name in text.__dataclass_fields__}
    tokens = {key: int(config.get(key, getattr(record, key))) for key in IMAGE_TOKEN_KEYS}
    return record(**fields, vision=vision, mrope_section=section, **tokens)


class Qwen2_5_VLForConditionalGeneration(LlamaForCausalLM):
    """The Qwen2 decoder's contract (llama.py), rotating q/k itself, plus the vision tower."""

    def __init__(
        self, config: Qwen2_5_VLConfig, dtype: str, target: Target, attention: str = "tir"
    ) -> None:
        super().__init__(config, dtype, target, attention)
        assert config.vision is not None
        self.visual = QwenVisionTower(config.vision, dtype)
        self.sectioned_positions = SectionedPositions(config.mrope_section)
        rope = rope_frequencies("default", {}, config.rope_theta, config.rotary_dim)
        for layer in self.model.layers:
            layer.self_attn.model_rope = rope
            layer.self_attn.sectioned_positions = self.sectioned_positions

    def cache_rope(self) -> dict[str, Any]:
        """The model rotates q/k in every layer (module doc): the cache does not."""
        return {**super().cache_rope(), "rope_mode": RopeMode.NONE}

    def encode_images(
        self,
        patches: Tensor,
        patch_positions: Tensor,
        window_index: Tensor,
        reverse_index: Tensor,
        image_segments: Tensor,
        window_segments: Tensor,
    ) -> Tensor:
        """The merged tokens [units, hidden] of every image's patches (qwen2_5_vision.py)."""
        return self.visual(
            patches, patch_positions, window_index, reverse_index, image_segments, window_segments
        )

    def prefill_images(
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        rope_positions: Tensor,
        kv_cache: PagedKVCache,
    ) -> tuple[Tensor, PagedKVCache]:
        """`prefill` with every token rotated at its `rope_positions` [3, tokens]."""
        with self.sectioned_positions.given(rope_positions):
            return self.prefill(input_embed, logit_positions, kv_cache)

    def export_spec(self) -> dict[str, Any]:
        vision = self.config.vision
        spec = super().export_spec()
        prefill = spec["prefill"]
        unit = vision.merge_unit
        encoder = {
            "patches": nn.spec.Tensor(["num_units", unit, vision.patch_width], self.dtype),
            "patch_positions": nn.spec.Tensor(["num_units", unit, 2], "int32"),
            "window_index": nn.spec.Tensor(["num_units"], "int32"),
            "reverse_index": nn.spec.Tensor(["num_units"], "int32"),
            "image_segments": nn.spec.Tensor(["num_units", unit], "int32"),
            "window_segments": nn.spec.Tensor(["num_units", unit], "int32"),
            "$": prefill["$"],
        }
        return {**spec, PREFILL_IMAGES: with_rope_positions(prefill), ENCODE_IMAGES: encoder}


def with_rope_positions(prefill: dict[str, Any]) -> dict[str, Any]:
    """The image prefill's signature: `prefill`'s with the M-RoPE positions [3, tokens]
    after the logit positions (where the runtime passes them)."""
    spec: dict[str, Any] = {}
    for name, argument in prefill.items():
        spec[name] = argument
        if name == "logit_positions":
            spec["rope_positions"] = nn.spec.Tensor([3, "seq_len"], "int32")
    return spec


def qwen2_5_vl_weight_sources(param_name: str) -> tuple[list[str], int]:
    """The vision tower's names are the checkpoint's (but the merger's MLP and the patch
    kernel); the decoder's are Qwen2's."""
    if param_name == PATCH_KERNEL:
        return [PATCH_KERNEL + ".weight"], 0
    for ours, theirs in MERGER_NAMES.items():
        if param_name.startswith(ours):
            return [theirs + param_name.removeprefix(ours)], 0
    if param_name.startswith(VISION_PREFIX):
        return [param_name], 0
    return fused_weight_sources(param_name)
