"""Host inputs of Qwen3.5's vision tower (model_defs/qwen3_5_vision.py), from each image's
patch grid (t, h, w), with numpy.

Why on the host: Qwen3.5 adds to each patch a learned position embedding read off a square
table (`num_position_embeddings` entries) bilinearly resampled to the image's grid. Which
four table entries a patch reads and with which weights depends on the image's size alone,
so the host decides them (transformers' `get_vision_interpolation_indices_and_weights`
with `mode="bilinear"`, `align_corners=True`, computed here in fp32 with the same
operations so the weights are bit-equal) and the compiled encoder does the weighted sum.
The 2-D rotary positions are Qwen2.5-VL's (patch_merge_layout.py); attention is full within
each frame, so each patch carries the index of its frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vllm_tvm.runtime.multimodal.patch_merge_layout import merge_block_positions

BILINEAR_TAPS = 4
"""Table entries a patch reads: (top, left), (top, right), (bottom, left), (bottom, right)."""


@dataclass(frozen=True)
class LearnedPositionLayout:
    """The encoder's inputs besides the patches, for all images of a prompt (in order), in
    the processor's patch order, grouped by merge unit."""

    patch_positions: np.ndarray
    """[units, merge², 2] int32: each patch's (row, column) in its image."""
    interpolation_indices: np.ndarray
    """[units, merge², 4] int32: the table entries each patch's position embedding mixes."""
    interpolation_weights: np.ndarray
    """[units, merge², 4] float32: their weights."""
    frame_segments: np.ndarray
    """[units, merge²] int32: the frame each patch belongs to (attention stays within it)."""

    def arrays(self) -> tuple[np.ndarray, ...]:
        """In the order the compiled encoder takes them after the patches."""
        return (
            self.patch_positions,
            self.interpolation_indices,
            self.interpolation_weights,
            self.frame_segments,
        )


def _axis_taps(index: np.ndarray, size: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """The two table rows (or columns) of an image axis of `size` patches read at `index`,
    and their weights: the axis' ends map onto the table's ends (align_corners)."""
    source = index.astype(np.float32) * np.float32(side - 1) / np.float32(max(size - 1, 1))
    floor = np.floor(source)
    offsets = np.arange(2, dtype=np.float32)
    taps = np.clip(floor.astype(np.int64)[:, None] + np.arange(2), 0, side - 1)
    distance = np.abs(source[:, None] - floor[:, None] - offsets)
    weights = np.maximum(np.float32(1) - distance, np.float32(0))
    return taps, weights


def bilinear_taps(grids: np.ndarray, side: int, merge: int) -> tuple[np.ndarray, np.ndarray]:
    """[patches, 4] int64 table indices and [patches, 4] float32 weights resampling a
    `side` x `side` table to the grids `grids` [images, 3], the patches in the processor's
    order."""
    indices, weights = [], []
    for grid in grids:
        _, h, w = (int(x) for x in grid)
        positions = merge_block_positions(grid, merge)
        row_taps, row_weights = _axis_taps(positions[:, 0], h, side)
        col_taps, col_weights = _axis_taps(positions[:, 1], w, side)
        indices.append((row_taps[:, :, None] * side + col_taps[:, None, :]).reshape(-1, 4))
        weights.append((row_weights[:, :, None] * col_weights[:, None, :]).reshape(-1, 4))
    return np.concatenate(indices), np.concatenate(weights)


def learned_position_layout(
    grids: np.ndarray, merge: int, num_position_embeddings: int
) -> LearnedPositionLayout:
    """The layout of the images whose patch grids are `grids` [images, 3]."""
    side = int(num_position_embeddings**0.5)
    if side * side != num_position_embeddings:
        raise ValueError(f"num_position_embeddings {num_position_embeddings} is not a square table")
    unit = merge * merge
    indices, weights = bilinear_taps(grids, side, merge)
    frame_sizes = [int(h) * int(w) for t, h, w in grids for _ in range(int(t))]
    frames = np.repeat(np.arange(len(frame_sizes)), frame_sizes)
    positions = np.concatenate([merge_block_positions(grid, merge) for grid in grids])
    return LearnedPositionLayout(
        patch_positions=positions.reshape(-1, unit, 2).astype(np.int32),
        interpolation_indices=indices.reshape(-1, unit, BILINEAR_TAPS).astype(np.int32),
        interpolation_weights=weights.reshape(-1, unit, BILINEAR_TAPS).astype(np.float32),
        frame_segments=frames.reshape(-1, unit).astype(np.int32),
    )
