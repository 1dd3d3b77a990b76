"""An OpenAI `image_url` content part's URL -> a decoded image.

Accepted today: inline `data:` URLs, `data:image/<png|jpeg|webp|gif>[;param...];base64,<data>`.
An `http(s)` URL is refused by name until fetching exists (it needs its own size and time
limits and a test server); a local file is refused too (serving one needs an allowed
directory). The encoded size is checked from the base64 length before anything is decoded."""

from __future__ import annotations

import base64
import binascii

from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage, ImageLimits, decode_image
from vllm_tvm.runtime.multimodal.image_errors import ImageInputError

ACCEPTED_MEDIA_TYPES = ("image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif")
"""The media types a data URL may declare; the bytes' real format is then read from the
bytes themselves (restricted to the same formats), as browsers and vLLM do."""


def load_image_url(url: str, part_index: int, limits: ImageLimits | None = None) -> DecodedImage:
    """The image an `image_url` part points at, or an ImageInputError naming the part."""
    limits = limits or ImageLimits()
    scheme = url.split(":", 1)[0].strip().lower() if ":" in url else ""
    if scheme == "data":
        return decode_image(_data_url_bytes(url, part_index, limits), part_index, limits)
    if scheme in ("http", "https"):
        raise ImageInputError(
            part_index,
            "http(s) image URLs are not supported yet; send the image inline as a "
            "data: URL (data:image/png;base64,...)",
        )
    if scheme == "file":
        raise ImageInputError(
            part_index, "local image files are not served; send the image inline as a data: URL"
        )
    raise ImageInputError(
        part_index, f"image URL scheme {scheme!r} is not supported; accepted: data: (base64)"
    )


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
