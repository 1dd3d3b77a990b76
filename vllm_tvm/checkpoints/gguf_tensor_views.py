"""HF tensors that llama.cpp's converter did more to than rename: joined, reordered, re-encoded.

Why this exists: for most families one GGUF tensor is one HF tensor (gguf_tensor_names.py).
The Gated DeltaNet layers of `qwen3next` / `qwen35` files are not: the converter split
Qwen3-Next's `in_proj_qkvz` into `attn_qkv` and `attn_gate`, stored Qwen3.5's value heads
in ggml's tiled broadcast order instead of grouped by key head (rows of the projections,
entries of the per-head vectors, columns of `out_proj`), stored `A_log` as `-exp(A_log)`
and squeezed the conv weight. A `TensorView` says how one HF tensor is read back from the
tensors the index names; the weight reader applies it to dequantized values and, where
the blocks allow it (whole rows; column segments of whole blocks), to the stored blocks,
so such a weight can still stay quantized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType


@dataclass(frozen=True)
class TensorView:
    """One HF tensor as a function of other HF-named tensors of the file (the index's)."""

    parts: tuple[str, ...]
    """Index names whose rows are joined (axis 0), in this order."""
    rows: np.ndarray | None = None
    """HF row i is joined row rows[i]; None: the joined rows as they are."""
    column_segment: int = 0
    """Width of the column segments that `columns` reorders (0: columns as stored)."""
    columns: np.ndarray | None = None
    """HF column segment j is stored segment columns[j]."""
    decode: Callable[[np.ndarray], np.ndarray] | None = None
    """Stored values -> HF values (float32); a view with one exists only dequantized."""
    shape: tuple[int, ...] | None = None
    """The HF shape, when it differs from the joined rows' shape only by a reshape."""

    def hf_shape(self, part_shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        """The HF shape, from the shapes of the parts."""
        if self.shape is not None:
            return self.shape
        rows = sum(shape[0] for shape in part_shapes)
        return (rows, *part_shapes[0][1:])

    def values(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The HF tensor from the parts' dequantized values (each in HF layout)."""
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        if self.rows is not None:
            joined = joined[self.rows]
        if self.columns is not None:
            joined = _segments(joined, self.column_segment, self.columns)
        if self.decode is not None:
            joined = self.decode(joined.astype(np.float32))
        return joined.reshape(self.hf_shape([p.shape for p in parts]))

    def block_columns(self, quant_type: GGMLQuantizationType) -> int | None:
        """Bytes per column segment of a row stored in `quant_type` (0 without a column
        reordering), or None when a segment is not whole blocks (or the values are
        re-encoded): the view cannot be applied to stored blocks."""
        if self.decode is not None or self.shape is not None:
            return None
        if self.columns is None:
            return 0
        block_size, block_bytes = GGML_QUANT_SIZES[quant_type]
        if self.column_segment % block_size:
            return None
        return self.column_segment // block_size * block_bytes

    def blocks(self, parts: Sequence[np.ndarray], segment_bytes: int) -> np.ndarray:
        """The HF tensor's stored rows from the parts' block rows ([rows, bytes] uint8 each),
        `segment_bytes` from `block_columns`."""
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        if self.rows is not None:
            joined = joined[self.rows]
        if self.columns is not None:
            joined = _segments(joined, segment_bytes, self.columns)
        return np.ascontiguousarray(joined)


def _segments(values: np.ndarray, width: int, order: np.ndarray) -> np.ndarray:
    """The last axis of `values` cut into segments of `width`, gathered in `order`."""
    leading = values.shape[:-1]
    cut = values.reshape(*leading, -1, width)
    return cut[..., order, :].reshape(*leading, -1)


def stored_as_one(types: Sequence[GGMLQuantizationType]) -> GGMLQuantizationType | None:
    """The parts' common ggml type, or None when they differ."""
    return types[0] if len(set(types)) == 1 else None
