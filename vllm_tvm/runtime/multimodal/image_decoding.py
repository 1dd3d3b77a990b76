"""Encoded image bytes -> upright RGB pixels, the way transformers prepares an image for its
processors: the EXIF orientation applied (`transformers.image_utils.load_image` calls
`ImageOps.exif_transpose`), transparency (an alpha band, or a palette's or grayscale
image's transparent colour) composited onto white as the processors' `convert_to_rgb`
does, and any other mode (grayscale, palette, CMYK) converted to RGB by Pillow.

The bytes come from a request, so they are distrusted: the formats are an allow-list, the
size the header declares is held to a pixel budget before one pixel is decoded (a
decompression bomb stops there), and whatever the decoder raises on a truncated or corrupt
file becomes an `ImageInputError` naming the part, never a server error."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vllm_tvm.runtime.multimodal.image_errors import ImageInputError

ACCEPTED_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
"""Pillow's names of the formats a request may send (those OpenAI's API accepts)."""


@dataclass(frozen=True)
class ImageLimits:
    """How large one image may be, encoded and decoded. Pillow's own bomb guard (about 179
    megapixels, process-wide) is far above what a vision tower could use, so the budget here
    is checked first, per call."""

    max_encoded_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 8192 * 8192


@dataclass(frozen=True)
class DecodedImage:
    """One image of a request: `pixels` is (height, width, 3) uint8 RGB, upright;
    `part_index` the content part it came from, for the errors of later steps."""

    pixels: np.ndarray
    part_index: int

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])


def decode_image(data: bytes, part_index: int, limits: ImageLimits | None = None) -> DecodedImage:
    """The upright RGB pixels of one encoded image, or an ImageInputError saying why not."""
    limits = limits or ImageLimits()
    if not data:
        raise ImageInputError(part_index, "the image is empty (0 bytes)")
    if len(data) > limits.max_encoded_bytes:
        raise ImageInputError(
            part_index,
            f"the image is {len(data)} bytes; at most {limits.max_encoded_bytes} are accepted",
        )
    try:
        with Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS) as image:
            _check_pixel_budget(image.size, part_index, limits)
            image.load()
            pixels = np.asarray(_to_rgb(ImageOps.exif_transpose(image)))
    except ImageInputError:
        raise
    except UnidentifiedImageError:
        raise ImageInputError(
            part_index, f"not an image in an accepted format ({', '.join(ACCEPTED_FORMATS)})"
        ) from None
    except Image.DecompressionBombError as error:
        raise ImageInputError(part_index, f"the image is too large to decode: {error}") from None
    except MemoryError:
        raise
    except Exception as error:  # Pillow's decoders raise many types on hostile input
        raise ImageInputError(
            part_index, f"the image is truncated or corrupt ({type(error).__name__}: {error})"
        ) from None
    return DecodedImage(pixels=pixels, part_index=part_index)


def decoded_from_pil(image: Image.Image, part_index: int) -> DecodedImage:
    """An image the caller already opened with Pillow (`LLM`'s prompts), prepared as
    `decode_image` prepares decoded bytes."""
    return DecodedImage(np.asarray(_to_rgb(ImageOps.exif_transpose(image))), part_index)


def _check_pixel_budget(size: tuple[int, int], part_index: int, limits: ImageLimits) -> None:
    """Refuse an image whose header declares more pixels than the budget, before decoding."""
    width, height = size
    if width * height > limits.max_pixels:
        raise ImageInputError(
            part_index,
            f"the image is {width}x{height} = {width * height} pixels; "
            f"at most {limits.max_pixels} are accepted",
        )


def _to_rgb(image: Image.Image) -> Image.Image:
    """transformers' `convert_to_rgb` for PIL images: anything with transparency is laid on
    an opaque white background first, so transparent pixels read as white, not as whatever
    colour the encoder left under them."""
    has_transparency = "A" in image.getbands() or image.info.get("transparency") is not None
    if not has_transparency:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")
