"""Qwen2-VL's image processor (transformers' `Qwen2VLImageProcessor`, used by Qwen2-VL,
Qwen2.5-VL and the Qwen3.5 family): dynamic resolution. Each image keeps its aspect ratio
and is resized (bicubic) so that both sides are multiples of patch_size * merge_size and
its area lies within [min_pixels, max_pixels]; it is then rescaled, normalised with OpenAI
CLIP's mean and std, and cut into patch_size x patch_size patches, each repeated
temporal_patch_size times (a still image is one frame of a video), in the order the vision
tower's patch merger reads them: merge_size x merge_size neighbours consecutive.

pixel_values is (sum of grid_t * grid_h * grid_w, 3 * temporal_patch_size * patch_size**2);
image_grid_thw the (1, grid_h, grid_w) of each image."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.multimodal.image_errors import ImageInputError
from vllm_tvm.runtime.multimodal.image_processing_steps import (
    ProcessedImages,
    UnsupportedPreprocessorConfigError,
    channel_triple,
    config_value,
    refuse_unsupported_steps,
    resampling,
    rescale_and_normalize,
    resize,
)

QWEN2_VL_NAME = "Qwen2VLImageProcessor"
MAX_ASPECT_RATIO = 200
"""transformers refuses images more elongated than this; so do we, by name."""
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class Qwen2VLImageProcessor:
    """Defaults are transformers' class defaults; a checkpoint's config overrides them
    (Qwen2.5-VL's raises max_pixels to 12845056)."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    resample: Image.Resampling = Image.Resampling.BICUBIC
    rescale_factor: float = 1 / 255
    image_mean: tuple[float, float, float] = OPENAI_CLIP_MEAN
    image_std: tuple[float, float, float] = OPENAI_CLIP_STD

    @classmethod
    def from_preprocessor_config(cls, config: Mapping[str, Any]) -> Qwen2VLImageProcessor:
        """`min_pixels` / `max_pixels` win over `size`'s shortest_edge / longest_edge, as in
        transformers (both spellings exist in released checkpoints)."""
        refuse_unsupported_steps(config, QWEN2_VL_NAME)
        size = config_value(config, "size", {})
        if not isinstance(size, Mapping):
            raise UnsupportedPreprocessorConfigError(
                f"{QWEN2_VL_NAME}: size={size!r} is not supported; "
                "expected {'shortest_edge', 'longest_edge'} (pixel counts)"
            )
        return cls(
            min_pixels=int(
                config_value(config, "min_pixels", size.get("shortest_edge", cls.min_pixels))
            ),
            max_pixels=int(
                config_value(config, "max_pixels", size.get("longest_edge", cls.max_pixels))
            ),
            patch_size=int(config_value(config, "patch_size", cls.patch_size)),
            temporal_patch_size=int(
                config_value(config, "temporal_patch_size", cls.temporal_patch_size)
            ),
            merge_size=int(config_value(config, "merge_size", cls.merge_size)),
            resample=resampling(config, cls.resample),
            rescale_factor=float(config_value(config, "rescale_factor", cls.rescale_factor)),
            image_mean=channel_triple(config, "image_mean", cls.image_mean),
            image_std=channel_triple(config, "image_std", cls.image_std),
        )

    def resized_size(self, height: int, width: int, part_index: int) -> tuple[int, int]:
        """transformers' `smart_resize`: the nearest multiples of the factor (Python's
        round-half-to-even), then scaled down to fit max_pixels or up to reach min_pixels,
        keeping the aspect ratio."""
        if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
            raise ImageInputError(
                part_index,
                f"the image is {width}x{height}; its aspect ratio must be at most "
                f"{MAX_ASPECT_RATIO}:1 for {QWEN2_VL_NAME}",
            )
        factor = self.patch_size * self.merge_size
        resized_height = round(height / factor) * factor
        resized_width = round(width / factor) * factor
        if resized_height * resized_width > self.max_pixels:
            shrink = math.sqrt(height * width / self.max_pixels)
            resized_height = max(factor, math.floor(height / shrink / factor) * factor)
            resized_width = max(factor, math.floor(width / shrink / factor) * factor)
        elif resized_height * resized_width < self.min_pixels:
            grow = math.sqrt(self.min_pixels / (height * width))
            resized_height = math.ceil(height * grow / factor) * factor
            resized_width = math.ceil(width * grow / factor) * factor
        return resized_height, resized_width

    def preprocess(self, images: Sequence[DecodedImage]) -> ProcessedImages:
        """Every image's patches, concatenated in the images' order, and their grids."""
        patches, grids = [], []
        for image in images:
            height, width = self.resized_size(image.height, image.width, image.part_index)
            normalized = rescale_and_normalize(
                resize(image.pixels, height, width, self.resample),
                self.rescale_factor,
                self.image_mean,
                self.image_std,
            )
            patches.append(self._patches(normalized))
            grids.append((1, height // self.patch_size, width // self.patch_size))
        patch_dim = 3 * self.temporal_patch_size * self.patch_size**2
        return ProcessedImages(
            pixel_values=np.concatenate(patches)
            if patches
            else np.zeros((0, patch_dim), np.float32),
            image_grid_thw=np.array(grids, dtype=np.int64).reshape(-1, 3),
        )

    def _patches(self, image: np.ndarray) -> np.ndarray:
        """(3, H, W) -> (grid_h * grid_w, 3 * temporal * patch * patch). Rows walk the
        merge blocks in raster order and, inside each, its merge x merge patches; a row is
        channel, then time (the frame repeated), then the patch's pixels in raster order."""
        channels, height, width = image.shape
        patch, merge = self.patch_size, self.merge_size
        grid_h, grid_w = height // patch, width // patch
        blocks = image.reshape(
            channels, grid_h // merge, merge, patch, grid_w // merge, merge, patch
        )
        # -> (block row, block column, row in block, column in block, channel, y, x)
        ordered = blocks.transpose(1, 4, 2, 5, 0, 3, 6)
        framed = np.repeat(ordered[:, :, :, :, :, None], self.temporal_patch_size, axis=5)
        return framed.reshape(grid_h * grid_w, channels * self.temporal_patch_size * patch * patch)
