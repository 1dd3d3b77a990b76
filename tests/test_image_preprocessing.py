"""The image processors give the pixel values transformers' processors give, on real image
files: Gemma 3's fixed square and Qwen2-VL's dynamic resolution (min/max pixels, patching,
image_grid_thw), for every format and mode a client may send, tiny, huge and elongated.

The oracle is transformers' PIL backend (`Gemma3ImageProcessorPil`, `Qwen2VLImageProcessorPil`),
the one `AutoImageProcessor.from_pretrained` builds where torchvision is absent; it is fed
what transformers itself would load: `load_image` (EXIF applied) or the opened file (the
processor's own RGB conversion composites transparency onto white)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from image_files import (
    cmyk_jpeg,
    encode,
    exif_rotated_jpeg,
    grayscale_alpha_png,
    grayscale_png,
    noise_rgb,
    palette_png,
    rgb_file,
    rgba_png,
    rgba_webp,
)
from PIL import Image, ImageOps
from transformers.image_utils import load_image
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from vllm_tvm.runtime.multimodal.image_decoding import decode_image
from vllm_tvm.runtime.multimodal.image_processing_steps import (
    ProcessedImages,
    UnsupportedPreprocessorConfigError,
)
from vllm_tvm.runtime.multimodal.image_processors import image_processor_from_config

GEMMA3_CONFIG = {
    "image_processor_type": "Gemma3ImageProcessor",
    "processor_class": "Gemma3Processor",
    "size": {"height": 896, "width": 896},
    "resample": 2,
    "rescale_factor": 0.00392156862745098,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "do_convert_rgb": None,
    "do_pan_and_scan": None,
    "image_seq_length": 256,
}
"""google/gemma-3-4b-it's preprocessor_config.json."""

QWEN2_5_VL_CONFIG = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}
"""Qwen/Qwen2.5-VL-7B-Instruct's preprocessor_config.json."""

QWEN2_VL_SIZE_CONFIG = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "size": {"shortest_edge": 4 * 28 * 28, "longest_edge": 64 * 28 * 28},
}
"""The `size` spelling of the pixel bounds, small enough that ordinary images shrink."""

QWEN_16_PIXEL_PATCH_CONFIG = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
"""The shape of the Qwen3-VL / Qwen3.5 configs: 16-pixel patches (factor 32), a 256x256
floor, mean = std = 0.5."""

GEMMA3_OBLONG_CONFIG = {**GEMMA3_CONFIG, "size": {"height": 48, "width": 80}}
"""Gemma 3's processor at a small, non-square size: the same maths as 896x896 at a
fraction of the time, and a height/width mix-up cannot pass."""

HF_PROCESSORS = {
    "gemma3": (GEMMA3_CONFIG, Gemma3ImageProcessorPil),
    "gemma3_oblong": (GEMMA3_OBLONG_CONFIG, Gemma3ImageProcessorPil),
    "qwen2_5_vl": (QWEN2_5_VL_CONFIG, Qwen2VLImageProcessorPil),
    "qwen2_vl_size": (QWEN2_VL_SIZE_CONFIG, Qwen2VLImageProcessorPil),
    "qwen_16_pixel_patch": (QWEN_16_PIXEL_PATCH_CONFIG, Qwen2VLImageProcessorPil),
}

FILES = {
    "png": lambda: rgb_file(37, 53, "PNG"),
    "jpeg": lambda: rgb_file(48, 64, "JPEG"),
    "webp": lambda: rgb_file(30, 50, "WEBP"),
    "gif": lambda: rgb_file(20, 33, "GIF"),
    "rgba": lambda: rgba_png(41, 29),
    "grayscale": lambda: grayscale_png(33, 45),
    "palette": lambda: palette_png(25, 35),
    "palette_transparent": lambda: palette_png(25, 35, transparent_index=3),
    "exif_rotated_jpeg": lambda: exif_rotated_jpeg(24, 60),
    "exif_upside_down_jpeg": lambda: exif_rotated_jpeg(24, 60, orientation=3),
    "exif_rotated_counterclockwise_jpeg": lambda: exif_rotated_jpeg(24, 60, orientation=8),
    "exif_mirrored_jpeg": lambda: exif_rotated_jpeg(24, 60, orientation=2),
    "grayscale_alpha": lambda: grayscale_alpha_png(31, 27),
    "rgba_webp": lambda: rgba_webp(26, 38),
    "cmyk_jpeg": lambda: cmyk_jpeg(40, 36),
    "one_pixel": lambda: rgb_file(1, 1),
    "two_by_two": lambda: rgb_file(2, 2),
    "three_by_five": lambda: rgb_file(3, 5),
    "five_by_three": lambda: rgb_file(5, 3),
    "half_way_rounding": lambda: rgb_file(70, 98),
    "wide_strip": lambda: rgb_file(7, 300),
    "tall_strip": lambda: rgb_file(450, 9),
}


def hf_oracle_input(data: bytes) -> Image.Image:
    """What transformers would process: `load_image` for opaque images (it applies the EXIF
    orientation, then drops alpha), the opened file upright for transparent ones (the
    processor composites them onto white itself)."""
    opened = Image.open(io.BytesIO(data))
    if "A" in opened.getbands() or "transparency" in opened.info:
        return ImageOps.exif_transpose(opened)
    return load_image(opened)


def hf_pixel_values(processor: str, images: list[Image.Image]) -> dict[str, np.ndarray]:
    """A null in a config means the class default; transformers' `from_dict` instead sets
    the attribute to None, so Gemma 3's `"do_convert_rgb": null` turns its RGB conversion
    off and a grayscale, palette or RGBA image fails there with a channel-count error. The
    oracle is therefore built from the config without its nulls."""
    config, hf_class = HF_PROCESSORS[processor]
    explicit = {key: value for key, value in config.items() if value is not None}
    return dict(hf_class.from_dict(explicit)(images, return_tensors="np"))


def assert_same_as_hf(processor: str, files: list[bytes]) -> ProcessedImages:
    ours = image_processor_from_config(HF_PROCESSORS[processor][0]).preprocess(
        [decode_image(data, part_index) for part_index, data in enumerate(files)]
    )
    theirs = hf_pixel_values(processor, [hf_oracle_input(data) for data in files])
    assert ours.pixel_values.dtype == np.float32
    assert ours.pixel_values.shape == theirs["pixel_values"].shape
    assert np.abs(ours.pixel_values - theirs["pixel_values"]).max() <= 1e-5
    if "image_grid_thw" in theirs:
        np.testing.assert_array_equal(ours.image_grid_thw, theirs["image_grid_thw"])
    else:
        assert ours.image_grid_thw is None
    return ours


@pytest.mark.parametrize("processor", ["gemma3_oblong", "qwen2_5_vl", "qwen2_vl_size"])
@pytest.mark.parametrize("kind", sorted(FILES))
def test_pixel_values_equal_transformers(processor: str, kind: str) -> None:
    assert_same_as_hf(processor, [FILES[kind]()])


@pytest.mark.parametrize("processor", sorted(HF_PROCESSORS))
def test_several_images_of_different_sizes_keep_their_order(processor: str) -> None:
    """Gemma 3's released 896x896 configuration and the 16-pixel-patch Qwen shape are
    checked here, once each."""
    assert_same_as_hf(processor, [rgb_file(40, 90, seed=1), rgba_png(64, 32), rgb_file(3, 5)])


def _huge_photo() -> bytes:
    """A 3000x4000 JPEG (12 megapixels, as a phone takes them)."""
    tile = noise_rgb(300, 400)
    return encode(Image.fromarray(np.tile(tile, (10, 10, 1))), "JPEG")


def test_a_huge_photo_is_shrunk_to_max_pixels_as_transformers_does() -> None:
    _, grid_h, grid_w = assert_same_as_hf("qwen2_vl_size", [_huge_photo()]).image_grid_thw[0]
    assert grid_h * grid_w * 14 * 14 <= QWEN2_VL_SIZE_CONFIG["size"]["longest_edge"]


@pytest.mark.parametrize("processor", ["gemma3", "gemma3_oblong"])
def test_a_huge_photo_is_resized_to_gemma3s_square_as_transformers_does(processor: str) -> None:
    """A 12-megapixel photo to 896x896 and to 48x80: the bilinear filter's support widens
    with the scale, so a large reduction is its own case."""
    assert_same_as_hf(processor, [_huge_photo()])


def test_the_exif_orientation_is_applied_before_processing() -> None:
    decoded = decode_image(exif_rotated_jpeg(24, 60), 0)
    assert (decoded.height, decoded.width) == (60, 24)


def test_transparent_pixels_read_as_white() -> None:
    transparent = Image.new("RGBA", (4, 3), (10, 200, 30, 0))
    assert (decode_image(encode(transparent, "PNG"), 0).pixels == 255).all()


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({**GEMMA3_CONFIG, "do_pan_and_scan": True}, "do_pan_and_scan"),
        ({**GEMMA3_CONFIG, "do_resize": False}, "do_resize"),
        ({**QWEN2_5_VL_CONFIG, "do_normalize": False}, "do_normalize"),
        ({**QWEN2_5_VL_CONFIG, "resample": 99}, "resample"),
        ({"image_processor_type": "SiglipImageProcessor"}, "SiglipImageProcessor"),
    ],
)
def test_unsupported_preprocessor_configs_are_refused_by_name(config: dict, named: str) -> None:
    with pytest.raises(UnsupportedPreprocessorConfigError, match=named):
        image_processor_from_config(config)
