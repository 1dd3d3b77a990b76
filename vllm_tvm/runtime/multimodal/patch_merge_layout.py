"""Index bookkeeping of a patch-merging vision tower (Qwen2.5-VL) and of its text model's
M-RoPE positions, from each image's patch grid (t, h, w), with numpy.

Why on the host: these are integer layouts decided by the images' sizes alone (which patch
sits in which row and column, which attention window, which image), the same for every
layer; the compiled encoder (model_defs/qwen2_5_vision.py) takes them as inputs and does
the arithmetic. They equal transformers' `get_vision_position_ids`,
`get_vision_window_index` and `get_rope_index` (tests/test_qwen2_5_vl_images.py compares
the encoder's output and the positions' effect on the logits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EncoderLayout:
    """The encoder's inputs besides the patches, for all images of a prompt (in order)."""

    patch_positions: np.ndarray
    """[units, merge², 2] int32: each patch's (row, column) in its image."""
    window_index: np.ndarray
    """[units] int32: the merge units in window order (window by window, each image's
    windows in raster order, the units of a window in raster order)."""
    reverse_index: np.ndarray
    """[units] int32: the inverse permutation (window order back to the processor's)."""
    image_segments: np.ndarray
    """[units, merge²] int32, in window order: the frame each patch belongs to (full
    attention stays within it)."""
    window_segments: np.ndarray
    """[units, merge²] int32, in window order: the window each patch belongs to."""

    def arrays(self) -> tuple[np.ndarray, ...]:
        """In the order the compiled encoder takes them after the patches."""
        return (
            self.patch_positions,
            self.window_index,
            self.reverse_index,
            self.image_segments,
            self.window_segments,
        )


def merged_tokens(grid: Sequence[int], merge: int) -> int:
    """Soft tokens of an image whose patch grid is `grid` (t, h, w)."""
    t, h, w = (int(x) for x in grid)
    return t * (h // merge) * (w // merge)


def merge_block_positions(grid: Sequence[int], merge: int) -> np.ndarray:
    """[t * h * w, 2] int64: each patch's (row, column) in its image, the patches in the
    processor's order (merge block by merge block in raster order, raster order inside a
    block; every frame alike) - transformers' `get_vision_position_ids`."""
    t, h, w = (int(x) for x in grid)
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    blocks = (h // merge, merge, w // merge, merge)
    row_ids = rows.reshape(blocks).transpose(0, 2, 1, 3).reshape(-1)
    col_ids = cols.reshape(blocks).transpose(0, 2, 1, 3).reshape(-1)
    return np.tile(np.stack([row_ids, col_ids], axis=-1), (t, 1))


def encoder_layout(
    grids: np.ndarray, merge: int, window_size: int, patch_size: int
) -> EncoderLayout:
    """The layout of the images whose patch grids are `grids` [images, 3]."""
    unit = merge * merge
    window_units = window_size // merge // patch_size
    positions, order, frames, windows = [], [], [], []
    offset = frame = window = 0
    for t, h, w in (tuple(int(x) for x in grid) for grid in grids):
        positions.append(merge_block_positions((t, h, w), merge))
        merged_h, merged_w = h // merge, w // merge
        index = np.arange(t * merged_h * merged_w).reshape(t, merged_h, merged_w)
        for time in range(t):
            for top in range(0, merged_h, window_units):
                for left in range(0, merged_w, window_units):
                    units = index[time, top : top + window_units, left : left + window_units]
                    order.append(units.reshape(-1) + offset)
                    windows.append(np.full(units.size, window))
                    frames.append(np.full(units.size, frame))
                    window += 1
            frame += 1
        offset += t * merged_h * merged_w
    window_index = np.concatenate(order).astype(np.int32)
    return EncoderLayout(
        patch_positions=np.concatenate(positions).reshape(-1, unit, 2).astype(np.int32),
        window_index=window_index,
        reverse_index=np.argsort(window_index).astype(np.int32),
        image_segments=np.repeat(np.concatenate(frames), unit).reshape(-1, unit).astype(np.int32),
        window_segments=np.repeat(np.concatenate(windows), unit).reshape(-1, unit).astype(np.int32),
    )


def image_runs(prompt_ids: Sequence[int], image_token_id: int) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive image tokens in `prompt_ids`."""
    runs: list[tuple[int, int]] = []
    start = None
    for index, token in enumerate([*prompt_ids, None]):
        if token == image_token_id and start is None:
            start = index
        elif token != image_token_id and start is not None:
            runs.append((start, index))
            start = None
    return runs


def rope_positions(
    prompt_length: int, runs: Sequence[tuple[int, int]], grids: np.ndarray, merge: int
) -> tuple[np.ndarray, int]:
    """transformers' `get_rope_index` for one prompt: the (temporal, row, column) positions
    [3, prompt_length] int32 of its tokens and the delta of every later token's position
    from its index. Text advances all three by one a token; an image (its run of soft tokens
    at `runs[i]`, grid `grids[i]`) sits at the position it starts from plus its frame, row
    and column, and the text after it starts max(rows, columns) later."""
    streams = np.zeros((3, prompt_length), dtype=np.int64)
    position = cursor = 0
    for (start, end), grid in zip(runs, grids, strict=True):
        streams[:, cursor:start] = np.arange(start - cursor) + position
        position += start - cursor
        t, h, w = int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge
        frames, rows, cols = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
        streams[:, start:end] = np.stack([frames, rows, cols]).reshape(3, -1) + position
        position += max(h, w)
        cursor = end
    streams[:, cursor:] = np.arange(prompt_length - cursor) + position
    delta = int(streams.max()) + 1 - prompt_length if prompt_length else 0
    return streams.astype(np.int32), delta
