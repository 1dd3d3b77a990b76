"""Real image files for the image tests, made with Pillow in memory: every format and mode a
client may send (PNG, JPEG, WebP, GIF; RGB, RGBA, grayscale with and without alpha, palette
with and without a transparent colour, CMYK JPEG, WebP with alpha), EXIF-rotated JPEGs,
and a data: URL around any of them."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

MIME_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
EXIF_ORIENTATION_TAG = 0x0112
ROTATED_90_CLOCKWISE = 6
"""EXIF orientation 6: the stored pixels must be turned 90 degrees clockwise to stand up."""


def noise_rgb(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Smooth gradients plus noise: every filter tap matters and lossy codecs keep detail."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width]
    base = np.stack(
        [ys * 255 // max(height - 1, 1), xs * 255 // max(width - 1, 1), (ys + xs) % 256], -1
    )
    noise = rng.integers(-40, 41, (height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encode(image: Image.Image, image_format: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, image_format, **options)
    return buffer.getvalue()


def rgb_file(height: int, width: int, image_format: str = "PNG", seed: int = 0) -> bytes:
    return encode(Image.fromarray(noise_rgb(height, width, seed)), image_format)


def rgba_png(height: int, width: int) -> bytes:
    """Alpha from fully transparent to opaque, over colours that must not show through."""
    alpha = np.linspace(0, 255, height * width).reshape(height, width, 1).astype(np.uint8)
    return encode(Image.fromarray(np.concatenate([noise_rgb(height, width), alpha], -1)), "PNG")


def grayscale_png(height: int, width: int) -> bytes:
    return encode(Image.fromarray(noise_rgb(height, width)[..., 0]), "PNG")


def palette_png(height: int, width: int, transparent_index: int | None = None) -> bytes:
    palette = Image.fromarray(noise_rgb(height, width)).quantize(colors=16)
    options = {} if transparent_index is None else {"transparency": transparent_index}
    return encode(palette, "PNG", **options)


def exif_rotated_jpeg(height: int, width: int, orientation: int = ROTATED_90_CLOCKWISE) -> bytes:
    """Stored as height x width with EXIF `orientation` (the default: upright it is width x
    height)."""
    image = Image.fromarray(noise_rgb(height, width))
    exif = Image.Exif()
    exif[EXIF_ORIENTATION_TAG] = orientation
    return encode(image, "JPEG", exif=exif.tobytes(), quality=95)


def grayscale_alpha_png(height: int, width: int) -> bytes:
    """Mode LA: grey with an alpha ramp."""
    grey = noise_rgb(height, width)[..., :1]
    alpha = np.linspace(0, 255, height * width).reshape(height, width, 1).astype(np.uint8)
    return encode(Image.fromarray(np.concatenate([grey, alpha], -1), "LA"), "PNG")


def rgba_webp(height: int, width: int) -> bytes:
    """A lossless WebP with an alpha channel."""
    rgba = Image.open(io.BytesIO(rgba_png(height, width)))
    return encode(rgba, "WEBP", lossless=True)


def cmyk_jpeg(height: int, width: int) -> bytes:
    """A CMYK JPEG (as print workflows save them)."""
    return encode(Image.fromarray(noise_rgb(height, width)).convert("CMYK"), "JPEG", quality=95)


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
