"""Qwen3.5 / Qwen3.6 with images (`Qwen3_5ForConditionalGeneration`,
`Qwen3_5MoeForConditionalGeneration`): the hybrid decoder (qwen3_next.py) with M-RoPE on
its gated full-attention layers, plus `encode_images` (qwen3_5_vision.py) and
`prefill_images`, the prefill at explicit 3-D positions.

Why the model rotates q/k, as Qwen2.5-VL's definition does (qwen2_5_vl.py says it at
length): TVM's paged KV cache rotates at one position per token, and an image token's
three streams (temporal, row, column) differ, with the text after an image at
`index + rope_delta`. So the full-attention layers rotate q/k themselves (rotary.py) and
the cache runs `RopeMode.NONE`: at the cache's positions in `prefill` / `decode` (equal
streams are the plain rotation), at the runtime's `rope_positions` [3, tokens] in
`prefill_images`. Qwen3.5's sections interleave (transformers' `Qwen3_5TextRotaryEmbedding`:
frequency i rotates by stream i mod 3 while that stream has frequencies left), over the
partial rotary's first channels only. The Gated DeltaNet layers take no positions: the
recurrent state and the pools are the hybrid's, unchanged.

Checkpoint names: the decoder under `model.language_model.` (and `lm_head.`, or tied), the
vision tower under `model.visual.`; `mtp.*` is the MTP layer's own build (qwen3_next_mtp.py),
which drafts from `prefill_hidden` / `prefill_images_hidden` of a target built with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache, RopeMode
from tvm.target import Target

from vllm_tvm.checkpoints.families.qwen2_5_vl import MROPE_SECTION, mrope_section
from vllm_tvm.model_defs.config import ModelConfigError
from vllm_tvm.model_defs.gemma3_multimodal import ENCODE_IMAGES, PREFILL_IMAGES
from vllm_tvm.model_defs.qwen2_5_vl import with_rope_positions, with_vision
from vllm_tvm.model_defs.qwen3_5_vision import (
    Qwen3_5VisionConfig,
    Qwen3_5VisionTower,
    parse_qwen3_5_vision_config,
    qwen3_5_vision_weight_source,
)
from vllm_tvm.model_defs.qwen3_next import HybridForCausalLM, States, hybrid_weight_sources
from vllm_tvm.model_defs.qwen3_next_config import HybridConfig, parse_hybrid_config
from vllm_tvm.model_defs.recurrent_kernels import RecurrentKernels
from vllm_tvm.model_defs.rope_scaling import rope_frequencies
from vllm_tvm.model_defs.rotary import SectionedPositions

VISION_PREFIX = "visual."
CHECKPOINT_PREFIX = "model."
"""What the checkpoint puts before the tower's names (`model.visual.`)."""
DEFAULT_MROPE_SECTION = (11, 11, 10)
"""transformers' `Qwen3_5TextRotaryEmbedding` default."""


@dataclass(frozen=True)
class Qwen3_5VLConfig(HybridConfig):
    """The hybrid decoder's config plus M-RoPE's sections, the vision tower and the image
    tokens (defaults: transformers' `Qwen3_5Config`)."""

    vision: Qwen3_5VisionConfig | None = None
    mrope_section: tuple[int, ...] = DEFAULT_MROPE_SECTION
    image_token_id: int = 248_056
    vision_start_token_id: int = 248_053
    vision_end_token_id: int = 248_054


def _sections(config: dict[str, Any]) -> tuple[int, ...]:
    """The text config's `mrope_section`, transformers' default where it names none."""
    text = config.get("text_config") or {}
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    return mrope_section(config) if MROPE_SECTION in rope else DEFAULT_MROPE_SECTION


def parse_qwen3_5_vl_config(
    config: dict[str, Any], max_model_len: int | None = None
) -> Qwen3_5VLConfig:
    """The hybrid decoder (text_config), its M-RoPE sections and the vision tower."""
    text = parse_hybrid_config(config, max_model_len)
    vision = parse_qwen3_5_vision_config(config.get("vision_config") or {}, ModelConfigError)
    return with_vision(Qwen3_5VLConfig, text, config, _sections(config), vision)


class Qwen3_5VLForConditionalGeneration(HybridForCausalLM):
    """The hybrid contract (qwen3_next.py), its full layers rotating q/k, plus the tower."""

    def __init__(
        self,
        config: Qwen3_5VLConfig,
        dtype: str,
        target: Target,
        attention: str = "tir",
        *,
        kernels: RecurrentKernels,
    ) -> None:
        super().__init__(config, dtype, target, attention, kernels=kernels)
        assert config.vision is not None
        self.visual = Qwen3_5VisionTower(config.vision, dtype)
        self.sectioned_positions = SectionedPositions(config.mrope_section, interleaved=True)
        rope = rope_frequencies("default", {}, config.rope_theta, config.rotary_dim)
        for layer in self.model.layers:
            if layer.is_full:
                layer.self_attn.model_rope = rope
                layer.self_attn.sectioned_positions = self.sectioned_positions

    def cache_rope(self) -> dict[str, Any]:
        """The full layers rotate q/k themselves (module doc): the cache does not."""
        return {**super().cache_rope(), "rope_mode": RopeMode.NONE}

    def encode_images(
        self,
        patches: Tensor,
        patch_positions: Tensor,
        interpolation_indices: Tensor,
        interpolation_weights: Tensor,
        frame_segments: Tensor,
    ) -> Tensor:
        """The merged tokens [units, hidden] of every image's patches (qwen3_5_vision.py)."""
        return self.visual(
            patches, patch_positions, interpolation_indices, interpolation_weights, frame_segments
        )

    def prefill_images(
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        rope_positions: Tensor,
        kv_cache: PagedKVCache,
        seq_starts: Tensor,
        slots: Tensor,
        conv_states: States,
        recurrent_states: States,
    ) -> tuple[Tensor, PagedKVCache, States, States]:
        """`prefill` with every token rotated at its `rope_positions` [3, tokens]."""
        with self.sectioned_positions.given(rope_positions):
            return self.prefill(
                input_embed,
                logit_positions,
                kv_cache,
                seq_starts,
                slots,
                conv_states,
                recurrent_states,
            )

    def prefill_images_hidden(
        self,
        input_embed: Tensor,
        logit_positions: Tensor,
        rope_positions: Tensor,
        kv_cache: PagedKVCache,
        seq_starts: Tensor,
        slots: Tensor,
        conv_states: States,
        recurrent_states: States,
    ) -> tuple[Tensor, Tensor, PagedKVCache, States, States]:
        """`prefill_hidden` at `rope_positions`: the image prefill, and the verify forward
        of a request after its images, of a target whose MTP layer drafts from its hidden
        states (qwen3_next_mtp.py)."""
        with self.sectioned_positions.given(rope_positions):
            return self.prefill_hidden(
                input_embed,
                logit_positions,
                kv_cache,
                seq_starts,
                slots,
                conv_states,
                recurrent_states,
            )

    def export_spec(self) -> dict[str, Any]:
        vision = self.config.vision
        spec = super().export_spec()
        unit = vision.merge_unit
        taps = ["num_units", unit, "taps"]  # the table entries each patch mixes
        encoder = {
            "patches": nn.spec.Tensor(["num_units", unit, vision.patch_width], self.dtype),
            "patch_positions": nn.spec.Tensor(["num_units", unit, 2], "int32"),
            "interpolation_indices": nn.spec.Tensor(taps, "int32"),
            "interpolation_weights": nn.spec.Tensor(taps, "float32"),
            "frame_segments": nn.spec.Tensor(["num_units", unit], "int32"),
            "$": spec["prefill"]["$"],
        }
        image_prefills = {PREFILL_IMAGES: with_rope_positions(spec["prefill"])}
        if self.exports_hidden_states:
            hidden = with_rope_positions(spec["prefill_hidden"])
            image_prefills[f"{PREFILL_IMAGES}_hidden"] = hidden
        return {**spec, **image_prefills, ENCODE_IMAGES: encoder}


def qwen3_5_vl_weight_sources(config: HybridConfig, param_name: str) -> tuple[list[str], int]:
    """The vision tower's tensors under `model.visual.` (qwen3_5_vision.py's names), the
    decoder's as the hybrid's text tower reads them."""
    if param_name.startswith(VISION_PREFIX):
        return [CHECKPOINT_PREFIX + qwen3_5_vision_weight_source(param_name, VISION_PREFIX)], 0
    return hybrid_weight_sources(config, param_name)
