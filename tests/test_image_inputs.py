"""Images from OpenAI `image_url` content parts: a base64 `data:` URL decodes to the same
pixels as its bytes, and every hostile or unsupported input (truncated or corrupt file,
bytes that are no image, bad base64, a wrong media type, too many bytes or pixels, an
image too elongated for Qwen, a file URL with no allowed directory) is an ImageInputError naming the
content part, never another exception."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from image_files import data_url, encode, rgb_file
from PIL import Image

from vllm_tvm.runtime.multimodal.image_decoding import ImageLimits, decode_image
from vllm_tvm.runtime.multimodal.image_errors import ImageInputError
from vllm_tvm.runtime.multimodal.image_url import load_image_url
from vllm_tvm.runtime.multimodal.qwen2_vl_image_processor import Qwen2VLImageProcessor

PART = 3
"""A content part index that is not the first, so the error must carry the real one."""


def png_declaring_size(width: int, height: int) -> bytes:
    """A PNG whose header (IHDR, with a valid CRC) claims `width` x `height`, followed by a
    few bytes of pixel data: only a check of the header can stop it cheaply."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\0" * 64)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def assert_refused(url: str, reason: str, limits: ImageLimits | None = None) -> None:
    with pytest.raises(ImageInputError, match=reason) as raised:
        load_image_url(url, PART, limits)
    assert raised.value.part_index == PART
    assert f"image content part {PART}" in str(raised.value)


@pytest.mark.parametrize(
    ("image_format", "media_type"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("GIF", "image/gif")],
)
def test_a_data_url_decodes_to_the_pixels_of_its_bytes(image_format: str, media_type: str) -> None:
    data = rgb_file(9, 13, image_format)
    from_url = load_image_url(data_url(data, media_type), PART)
    expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    np.testing.assert_array_equal(from_url.pixels, expected)
    assert from_url.part_index == PART


def test_base64_wrapped_over_lines_is_accepted() -> None:
    url = data_url(rgb_file(8, 8))
    header, payload = url.split(",", 1)
    wrapped = "\n".join(payload[i : i + 76] for i in range(0, len(payload), 76))
    assert load_image_url(f"{header},{wrapped}", PART).pixels.shape == (8, 8, 3)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (data_url(rgb_file(40, 40)[:200]), "truncated or corrupt"),
        (data_url(rgb_file(40, 40, "JPEG")[:300], "image/jpeg"), "truncated or corrupt"),
        (data_url(b"this is not an image at all"), "not an image in an accepted format"),
        (data_url(encode(Image.new("RGB", (4, 4)), "BMP")), "not an image in an accepted format"),
        (data_url(b""), "empty"),
        ("data:image/png;base64,@@not*base64@@", "not valid base64"),
        ("data:image/png;base64,iVBORw0KGgo", "not valid base64"),
        (data_url(rgb_file(4, 4), "text/plain"), "media type 'text/plain' is not accepted"),
        (data_url(rgb_file(4, 4), "application/octet-stream"), "media type"),
        ("data:image/png,rawbytes", "only base64"),
        ("data:image/png;base64", "needs a ','"),
        (data_url(png_declaring_size(9000, 9000)), "9000x9000 = 81000000 pixels"),
        (data_url(png_declaring_size(0, 5)), "not an image in an accepted format"),
        ("file:///etc/passwd", "not served without --allowed-local-media-path"),
        ("ftp://example.com/cat.png", "scheme 'ftp' is not supported"),
        ("/etc/passwd", "scheme '' is not supported"),
    ],
)
def test_hostile_image_urls_are_refused_naming_the_part(url: str, reason: str) -> None:
    assert_refused(url, reason)


def test_too_many_encoded_bytes_are_refused_before_decoding() -> None:
    data = rgb_file(32, 32)
    limits = ImageLimits(max_encoded_bytes=len(data) - 1)
    assert_refused(data_url(data), f"at most {len(data) - 1} are accepted", limits)
    with pytest.raises(ImageInputError, match="bytes; at most"):
        decode_image(data, PART, limits)


def test_too_many_pixels_are_refused_before_decoding() -> None:
    assert_refused(
        data_url(rgb_file(30, 40)),
        "40x30 = 1200 pixels; at most 1199",
        ImageLimits(max_pixels=1199),
    )


def test_pillow_own_decompression_bomb_guard_is_an_image_error_too() -> None:
    assert_refused(
        data_url(png_declaring_size(20000, 20000)),
        "too large to decode",
        ImageLimits(max_pixels=10**9),
    )


def test_an_image_too_elongated_for_qwen_is_refused_naming_its_part() -> None:
    strip = load_image_url(data_url(rgb_file(1, 201)), PART)
    with pytest.raises(ImageInputError, match="aspect ratio must be at most 200") as raised:
        Qwen2VLImageProcessor().preprocess([strip])
    assert raised.value.part_index == PART
