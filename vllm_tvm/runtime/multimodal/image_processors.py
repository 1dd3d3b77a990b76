"""The image processor a checkpoint names in its preprocessor_config.json
(`image_processor_type`), built from that config; a processor not implemented is refused
by name with the list of those that are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_tvm.runtime.multimodal.gemma3_image_processor import GEMMA3_NAME, Gemma3ImageProcessor
from vllm_tvm.runtime.multimodal.image_processing_steps import UnsupportedPreprocessorConfigError
from vllm_tvm.runtime.multimodal.qwen2_vl_image_processor import (
    QWEN2_VL_NAME,
    Qwen2VLImageProcessor,
)

ImageProcessor = Gemma3ImageProcessor | Qwen2VLImageProcessor

PROCESSORS: dict[str, type[Gemma3ImageProcessor] | type[Qwen2VLImageProcessor]] = {
    GEMMA3_NAME: Gemma3ImageProcessor,
    QWEN2_VL_NAME: Qwen2VLImageProcessor,
}


def image_processor_from_config(config: Mapping[str, Any]) -> ImageProcessor:
    """transformers' backend suffixes (`...Fast`, `...Pil`) name the same processor."""
    name = str(config.get("image_processor_type", ""))
    base_name = name.removesuffix("Fast").removesuffix("Pil")
    if base_name not in PROCESSORS:
        raise UnsupportedPreprocessorConfigError(
            f"image_processor_type={name!r} is not supported; supported: {', '.join(PROCESSORS)}"
        )
    return PROCESSORS[base_name].from_preprocessor_config(config)
