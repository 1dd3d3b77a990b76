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
    lengths: tuple[int, ...]
    """Soft tokens of each image."""
    pixel_values: np.ndarray
    """As the image processor made them: [images, 3, H, W] float32 (fixed size), or the
    patches of all images grouped by merge unit [units, merge², patch width]."""
    digests: tuple[str, ...] = ()
    """sha256 of each image's pixel values (what tells two images apart)."""
    encoder_layout: tuple[np.ndarray, ...] = ()
    """The encoder's inputs after the pixel values (a patch-merging tower's index layout:
    runtime/multimodal/patch_merge_layout.py); empty for a fixed-size one."""
    rope_positions: np.ndarray | None = None
    """[3, prompt tokens] int32: the prompt's M-RoPE positions; None: 1-D positions."""
    rope_delta: int = 0
    """Position minus index of every token after the prompt (M-RoPE)."""
    embeddings: list[np.ndarray] | None = None
    """Each image's [tokens, hidden] once the encoder has run."""

    @property
    def placeholders(self) -> tuple[MediaPlaceholder, ...]:
        """Each image's soft-token range and digest, in prompt order."""
        return tuple(
            MediaPlaceholder(start, length, digest)
            for start, length, digest in zip(self.starts, self.lengths, self.digests, strict=True)
        )

    @property
    def prefill_floor(self) -> int:
        """Prompt tokens the first chunk must cover: through the end of the last image."""
        return self.starts[-1] + self.lengths[-1]

    def positions(self, start: int, count: int) -> np.ndarray:
        """[3, count] M-RoPE positions of the sequence's tokens [start, start + count) (the
        prompt's from its table, later ones at index + delta)."""
        assert self.rope_positions is not None
        prompt = self.rope_positions.shape[1]
        index = np.arange(start, start + count)
        later = np.broadcast_to(index + self.rope_delta, (3, count))
        inside = self.rope_positions[:, np.minimum(index, prompt - 1)]
        return np.where(index < prompt, inside, later).astype(np.int32)


@dataclass(frozen=True)
class ForwardImages:
    """The soft-token rows of one ragged forward (indices into its flattened tokens)."""

    rows: np.ndarray
    """[k] int: the rows whose embeddings are replaced."""
    embeddings: np.ndarray
    """[k, hidden]: what they are replaced with."""
    groups: np.ndarray
    """[k] int: which image each row belongs to (unique within the forward)."""
