"""Gemma 3's image processor (transformers' `Gemma3ImageProcessor`): every image resized to
one square (896x896 in the released checkpoints) with the checkpoint's filter (bilinear),
rescaled by 1/255 and normalised with mean = std = 0.5, whatever its aspect ratio.

Pan-and-scan (extra crops of very wide or tall images) is off in the released checkpoints
and refused by name here if a config turns it on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
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

GEMMA3_NAME = "Gemma3ImageProcessor"


@dataclass(frozen=True)
class Gemma3ImageProcessor:
    """Defaults are transformers' class defaults; a checkpoint's config overrides them."""

    height: int = 224
    width: int = 224
    resample: Image.Resampling = Image.Resampling.BILINEAR
    rescale_factor: float = 1 / 255
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    @classmethod
    def from_preprocessor_config(cls, config: Mapping[str, Any]) -> Gemma3ImageProcessor:
        refuse_unsupported_steps(config, GEMMA3_NAME)
        if config.get("do_pan_and_scan"):
            raise UnsupportedPreprocessorConfigError(
                f"{GEMMA3_NAME}: do_pan_and_scan=true is not supported; "
                "only the single resized image (do_pan_and_scan=false) is implemented"
            )
        size = config_value(config, "size", {"height": cls.height, "width": cls.width})
        if isinstance(size, int):
            size = {"height": size, "width": size}
        if not isinstance(size, Mapping) or set(size) != {"height", "width"}:
            raise UnsupportedPreprocessorConfigError(
                f"{GEMMA3_NAME}: size={size!r} is not supported; expected {{'height', 'width'}}"
            )
        return cls(
            height=int(size["height"]),
            width=int(size["width"]),
            resample=resampling(config, cls.resample),
            rescale_factor=float(config_value(config, "rescale_factor", cls.rescale_factor)),
            image_mean=channel_triple(config, "image_mean", cls.image_mean),
            image_std=channel_triple(config, "image_std", cls.image_std),
        )

    def preprocess(self, images: Sequence[DecodedImage]) -> ProcessedImages:
        """pixel_values (images, 3, height, width) float32, in the images' order."""
        processed = [
            rescale_and_normalize(
                resize(image.pixels, self.height, self.width, self.resample),
                self.rescale_factor,
                self.image_mean,
                self.image_std,
            )
            for image in images
        ]
        shape = (0, 3, self.height, self.width)
        return ProcessedImages(
            pixel_values=np.stack(processed) if processed else np.zeros(shape, np.float32)
        )
