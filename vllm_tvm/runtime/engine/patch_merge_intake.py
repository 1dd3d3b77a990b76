"""The images of a request for a patch-merging vision tower (Qwen2.5-VL, Qwen3.5): each image
at its own resolution, so each has its own number of soft tokens.

Why a subclass of the fixed-size intake (image_intake.py): the checks and the refusals are
the same; what differs is the placeholder and its expansion, and what the encoder and the
text model need besides the pixels. As transformers' Qwen2.5-VL processor does, a chat's
image part is `<|vision_start|><|image_pad|><|vision_end|>` and each image pad becomes as
many image pads as the image makes soft tokens (its patch grid over merge²); a prompt of
token ids gets the same expansion of each single image-pad id (a run already as long as
its image is kept). The prompt's M-RoPE positions and rope delta are settled here, with
its tokens (runtime/multimodal/patch_merge_layout.py); the encoder's index layout is
Qwen2.5-VL's windows or Qwen3.5's learned-position taps, as the artifact's spec says.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vllm_tvm.artifacts.runtime_spec import PatchMergeSpec
from vllm_tvm.runtime.engine.image_intake import ImageIntake, pixel_digest
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.multimodal.learned_position_layout import learned_position_layout
from vllm_tvm.runtime.multimodal.patch_merge_layout import (
    encoder_layout,
    image_runs,
    merged_tokens,
    rope_positions,
)
from vllm_tvm.runtime.requests.prompt_images import PromptImages

MAX_PROMPT_PATCHES = 8192
"""Most patches of all of a prompt's images together. The compiled tower's attention is
dense over them under a segment mask (model_defs/qwen2_5_vision.py): its scores take
heads x patches² x 4 bytes (16 heads at this cap: 4.3 GB), so larger inputs are refused
by name rather than exhausting memory; the checkpoint's `max_pixels` decides how many an
image makes."""


class PatchMergeImageIntake(ImageIntake):
    """`ImageIntake` for images at their own resolution (module doc)."""

    @property
    def placeholder(self) -> str | None:
        if self.tokenizer is None or self.processor is None:
            return None
        vision = self.vision
        return "".join(
            self._token(token)
            for token in (
                vision.begin_image_token_id,
                vision.image_token_id,
                vision.end_image_token_id,
            )
        )

    def soft_tokens(self, images: Sequence[DecodedImage]) -> list[int]:
        """Soft tokens of each image: its resized patch grid over the merge square."""
        processor = self._processor()
        resized_size = getattr(processor, "resized_size", None)
        if resized_size is None:
            raise ValueError(
                f"the checkpoint's image processor {type(processor).__name__} keeps no image "
                "at its own resolution; this vision tower needs Qwen2VLImageProcessor"
            )
        layout = self.vision.patch_merge
        assert layout is not None
        counts = []
        for image in images:
            height, width = resized_size(image.height, image.width, image.part_index)
            grid = (1, height // layout.patch_size, width // layout.patch_size)
            counts.append(merged_tokens(grid, layout.spatial_merge_size))
        return counts

    def expand_text(self, text: str, images: Sequence[DecodedImage]) -> str:
        """Each image pad of `text` repeated as many times as its image has soft tokens."""
        pad = self._token(self.vision.image_token_id)
        pieces = text.split(pad)
        self._check_count(len(pieces) - 1, len(images), pad)
        counts = self.soft_tokens(images)
        expanded = [pieces[0]]
        for count, piece in zip(counts, pieces[1:], strict=True):
            expanded += [pad * count, piece]
        return "".join(expanded)

    def expand_ids(self, prompt_ids: list[int], images: Sequence[DecodedImage]) -> list[int]:
        """Each run of image-pad ids made as long as its image's soft tokens (a run of one
        is expanded, a run of the right length kept)."""
        pad = self.vision.image_token_id
        runs = image_runs(prompt_ids, pad)
        self._check_count(len(runs), len(images), f"token id {pad} runs")
        expanded: list[int] = []
        cursor = 0
        for (start, end), count in zip(runs, self.soft_tokens(images), strict=True):
            if end - start not in (1, count):
                raise ValueError(
                    f"the run of {end - start} image tokens at position {start} is neither one "
                    f"placeholder nor the image's {count} soft tokens"
                )
            expanded += [*prompt_ids[cursor:start], *[pad] * count]
            cursor = end
        return [*expanded, *prompt_ids[cursor:]]

    def prompt_images(self, prompt_ids: list[int], images: Sequence[DecodedImage]) -> PromptImages:
        """The images' patches, where their soft tokens sit, the encoder's index layout and
        the prompt's M-RoPE positions; refuses a prompt whose images cannot be prefilled in
        one chunk."""
        vision = self.vision
        layout = vision.patch_merge
        assert layout is not None
        runs = image_runs(prompt_ids, vision.image_token_id)
        self._check_count(len(runs), len(images), f"token id {vision.image_token_id} runs")
        counts = self.soft_tokens(images)
        for (start, end), count in zip(runs, counts, strict=True):
            if end - start != count:
                raise ValueError(
                    f"the image at position {start} has {end - start} image tokens; it makes "
                    f"{count} soft tokens"
                )
        patches = sum(counts) * layout.spatial_merge_size**2
        if patches > MAX_PROMPT_PATCHES:
            raise ValueError(
                f"the prompt's images make {patches} patches, past the {MAX_PROMPT_PATCHES} "
                "the vision tower encodes at once (MAX_PROMPT_PATCHES): use smaller images or "
                "a lower max_pixels in preprocessor_config.json"
            )
        self._check_prefill_floor(runs[-1][1])
        processed = self._processor().preprocess(list(images))
        grids = processed.image_grid_thw
        assert grids is not None
        patches = processed.pixel_values.astype(np.float32)
        ends = np.cumsum([int(np.prod(grid)) for grid in grids])
        digests = tuple(
            pixel_digest(part, tuple(grid))
            for part, grid in zip(np.split(patches, ends[:-1]), grids, strict=True)
        )
        unit = layout.spatial_merge_size**2
        positions, delta = rope_positions(len(prompt_ids), runs, grids, layout.spatial_merge_size)
        return PromptImages(
            starts=tuple(start for start, _ in runs),
            lengths=tuple(counts),
            pixel_values=patches.reshape(-1, unit, patches.shape[-1]),
            digests=digests,
            encoder_layout=encoder_inputs(grids, layout),
            rope_positions=positions,
            rope_delta=delta,
        )


def encoder_inputs(grids: np.ndarray, layout: PatchMergeSpec) -> tuple[np.ndarray, ...]:
    """The encoder's inputs after the patches of images of patch grids `grids`: the
    learned position table's taps (Qwen3.5) or the attention windows (Qwen2.5-VL)."""
    merge = layout.spatial_merge_size
    if layout.position_embeddings:
        return learned_position_layout(grids, merge, layout.position_embeddings).arrays()
    return encoder_layout(grids, merge, layout.window_size, layout.patch_size).arrays()
