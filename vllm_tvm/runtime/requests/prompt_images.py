"""The images of one prompt inside the engine.

Why a type of its own: the sequences of a request share its images; each image's soft
tokens sit at a known place in the prompt, their embeddings are computed once by the
artifact's encoder (in the step that first prefills them) and then replace those tokens'
embeddings. The prefill of a prompt with images must run from its first token through the
end of its last image in one chunk (`prefill_floor`: model_defs/image_block_attention.py
says why), which the scheduler keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class MediaPlaceholder(NamedTuple):
    """One media item's placeholder tokens in a prompt, and what tells the item apart.

    The tokens alone cannot: every image's soft tokens carry the same placeholder id, so
    the prefix cache folds `digest` into the key of each block these tokens touch."""

    offset: int
    """The prompt position of the first placeholder token."""
    length: int
    """How many placeholder tokens the item has."""
    digest: str
    """A content hash of the item (hex). It must cover everything the item's placeholder
    tokens' keys and values depend on besides the tokens before them: the pixel values and,
    where the size varies, their shape or patch grid (two grids can hold equal bytes)."""


@dataclass(eq=False)
class PromptImages:
    """Where each image's soft tokens start in the prompt, its pixel values and, once
    encoded, its soft-token embeddings."""

    starts: tuple[int, ...]
    tokens_per_image: int
    pixel_values: np.ndarray
    """[images, 3, H, W] float32, as the image processor made them."""
    digests: tuple[str, ...] = ()
    """sha256 of each image's pixel values (what tells two images apart)."""
    embeddings: np.ndarray | None = None
    """[images, tokens_per_image, hidden] once the encoder has run."""

    @property
    def placeholders(self) -> tuple[MediaPlaceholder, ...]:
        """Each image's soft-token range and digest, in prompt order."""
        return tuple(
            MediaPlaceholder(start, self.tokens_per_image, digest)
            for start, digest in zip(self.starts, self.digests, strict=True)
        )

    @property
    def prefill_floor(self) -> int:
        """Prompt tokens the first chunk must cover: through the end of the last image."""
        return self.starts[-1] + self.tokens_per_image


@dataclass(frozen=True)
class ForwardImages:
    """The soft-token rows of one ragged forward (indices into its flattened tokens)."""

    rows: np.ndarray
    """[k] int: the rows whose embeddings are replaced."""
    embeddings: np.ndarray
    """[k, hidden]: what they are replaced with."""
    groups: np.ndarray
    """[k] int: which image each row belongs to (unique within the forward)."""
