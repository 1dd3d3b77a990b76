"""The one error every bad image raises, wherever it is found (the URL, the bytes, the pixels,
the processor's limits): it names the content part, so the server can answer a 400 that says
which image was wrong instead of a 500."""

from __future__ import annotations


class ImageInputError(ValueError):
    """An image a request sent cannot be used: `part_index` is its place among the message's
    content parts, `reason` what was wrong with it and what would be accepted."""

    def __init__(self, part_index: int, reason: str) -> None:
        super().__init__(f"image content part {part_index}: {reason}")
        self.part_index = part_index
        self.reason = reason
