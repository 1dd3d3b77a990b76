"""An OpenAI `image_url` content part's URL -> a decoded image.

Accepted: inline `data:` URLs, `data:image/<png|jpeg|webp|gif>[;param...];base64,<data>`
(the encoded size checked from the base64 length before anything is decoded), `http(s)`
URLs fetched within a time and byte limit, and `file://` URLs under the allowed local media
directory (media_sources.py). Every image is held to the same `ImageLimits`."""

from __future__ import annotations

import base64
import binascii

from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage, ImageLimits, decode_image
from vllm_tvm.runtime.multimodal.image_errors import ImageInputError
from vllm_tvm.runtime.multimodal.media_sources import (
    MediaSources,
    fetch_http_image,
    read_local_image,
)

ACCEPTED_MEDIA_TYPES = ("image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif")
"""The media types a data URL may declare; the bytes' real format is then read from the
bytes themselves (restricted to the same formats), as browsers and vLLM do."""


def load_image_url(
    url: str,
    part_index: int,
    limits: ImageLimits | None = None,
    sources: MediaSources | None = None,
) -> DecodedImage:
    """The image an `image_url` part points at, or an ImageInputError naming the part."""
    limits = limits or ImageLimits()
    sources = sources or MediaSources()
    scheme = url.split(":", 1)[0].strip().lower() if ":" in url else ""
    if scheme == "data":
        data = _data_url_bytes(url, part_index, limits)
    elif scheme in ("http", "https"):
        data = fetch_http_image(url, part_index, limits.max_encoded_bytes, sources)
    elif scheme == "file":
        data = read_local_image(url, part_index, limits.max_encoded_bytes, sources)
    else:
        raise ImageInputError(
            part_index,
            f"image URL scheme {scheme!r} is not supported; accepted: data: (base64), "
            "http(s), file (under --allowed-local-media-path)",
        )
    return decode_image(data, part_index, limits)


def _data_url_bytes(url: str, part_index: int, limits: ImageLimits) -> bytes:
    """The payload of a base64 `data:` URL, after its media type and size are checked."""
    header, comma, payload = url.split(":", 1)[1].partition(",")
    if not comma:
        raise ImageInputError(part_index, "a data: URL needs a ',' between its header and data")
    media_type, *parameters = (field.strip().lower() for field in header.split(";"))
    if media_type not in ACCEPTED_MEDIA_TYPES:
        raise ImageInputError(
            part_index,
            f"data: URL media type {media_type!r} is not accepted; "
            f"accepted: {', '.join(ACCEPTED_MEDIA_TYPES)}",
        )
    if parameters[-1:] != ["base64"]:
        raise ImageInputError(part_index, "only base64 data: URLs are accepted (…;base64,<data>)")
    compact = "".join(payload.split())
    if len(compact) // 4 * 3 > limits.max_encoded_bytes:
        raise ImageInputError(
            part_index,
            f"the image is about {len(compact) // 4 * 3} bytes; "
            f"at most {limits.max_encoded_bytes} are accepted",
        )
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ImageInputError(part_index, f"the data: URL is not valid base64 ({error})") from None
