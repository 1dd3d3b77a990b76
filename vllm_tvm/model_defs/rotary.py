"""RoPE applied by the model itself, where TVM's KV cache cannot apply it exactly.

Why: the paged KV cache rotates q/k with built-in formulas (rope_scaling.py says which ones
match transformers) and with one base frequency for all layers. For yarn and longrope, and
for models whose sliding layers use another RoPE base (Gemma 3), the frequencies come from
rope_scaling.py (per layer) and the rotation happens here, on the fused qkv, before the
cache (created with `RopeMode.NONE`) stores k. Positions are the cache's own query
positions, so chunked prefill, batching and prefix caching see the same positions as with
the cache's rotation. The rotation is transformers' `rotate_half` form over the first
`rotary_dim` channels.

Sectioned rotation (`apply_sectioned_rotary`): the frequencies are split into consecutive
sections, each rotated by its own position stream. Qwen2.5-VL's M-RoPE uses three (the
temporal, row and column positions of an image token; `mrope_section` frequencies each)
and its vision tower two (a patch's row and column, half of the frequencies each). When
every stream carries the same position it is the plain rotation at that position, which
is why a forward with no image tokens can use the cache's positions (`apply_rotary`).
Qwen3.5's M-RoPE interleaves the sections instead (frequency i of stream i mod 3 while
that stream has frequencies left, else of the temporal stream: `interleaved`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
from tvm import te, tirx
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache

PositionAt = Callable[[tirx.Expr, tirx.Expr], tirx.Expr]
"""(flattened token index, frequency index) -> that token's position for that frequency."""


def _rotate(
    qkv: te.Tensor,
    position_at: PositionAt,
    inv_freq: te.Tensor,
    rotating_heads: int,
    cos_sin_factor: float,
) -> te.Tensor:
    """qkv [b, s, heads, d] with the first `rotating_heads` heads (q, then k) rotated."""
    _, seq_len, _, head_dim = qkv.shape
    half = inv_freq.shape[0]

    def element(b: tirx.Var, s: tirx.Var, h: tirx.Var, d: tirx.Var) -> tirx.Expr:
        value = qkv[b, s, h, d]
        frequency = tirx.floormod(d, half)
        position = position_at(b * seq_len + s, frequency).astype("float32")
        angle = position * inv_freq[frequency]
        partner = tirx.if_then_else(
            d < half,
            -qkv[b, s, h, tirx.min(d + half, head_dim - 1)],
            qkv[b, s, h, tirx.max(d - half, 0)],
        )
        rotated = (
            tirx.cos(angle) * cos_sin_factor * value.astype("float32")
            + tirx.sin(angle) * cos_sin_factor * partner.astype("float32")
        ).astype(qkv.dtype)
        return tirx.if_then_else(tirx.all(h < rotating_heads, d < 2 * half), rotated, value)

    return te.compute(qkv.shape, element, name="rotary_embedding")


def apply_rotary(
    qkv: Tensor,
    kv_cache: PagedKVCache,
    inv_freq: np.ndarray,
    cos_sin_factor: float,
    rotating_heads: int,
) -> Tensor:
    """Rotate the q and k heads of `qkv` [b, s, heads, head_dim] at the cache's positions."""
    batch, seq_len, _, _ = qkv.shape
    positions = kv_cache.get_query_positions(batch * seq_len)
    return rotate_at(qkv, positions, inv_freq, cos_sin_factor, rotating_heads)


def rotate_at(
    qkv: Tensor,
    positions: Tensor,
    inv_freq: np.ndarray,
    cos_sin_factor: float,
    rotating_heads: int,
) -> Tensor:
    """Rotate the first `rotating_heads` heads of `qkv` [b, s, heads, head_dim] at
    `positions` [b * s]."""
    return op.tensor_expr_op(
        lambda x, pos, freq: _rotate(
            x, lambda token, _: pos[token], freq, rotating_heads, cos_sin_factor
        ),
        "rotary_embedding",
        [qkv, positions, Tensor.from_const(inv_freq)],
    )


class SectionedPositions:
    """The explicit position streams of the forward being traced (not a module: a
    definition with multi-section RoPE sets them while exporting the forward that takes
    them, nothing after; `rotate_by_model`)."""

    def __init__(self, sections: tuple[int, ...], interleaved: bool = False) -> None:
        self.sections = sections
        """Frequencies rotated by each stream."""
        self.interleaved = interleaved
        """Whether the streams' frequencies interleave (Qwen3.5) or follow each other."""
        self.positions: Tensor | None = None
        """[streams, tokens] int32; None: every stream is the cache's position."""

    @contextmanager
    def given(self, positions: Tensor) -> Iterator[None]:
        """The forward traced inside rotates at `positions`; none traced after does."""
        self.positions = positions
        try:
            yield
        finally:
            self.positions = None


def rotate_by_model(
    qkv: Tensor,
    kv_cache: PagedKVCache,
    rope: tuple[np.ndarray, float],
    sectioned: SectionedPositions | None,
    rotating_heads: int,
) -> Tensor:
    """Rotate the q and k heads of `qkv` [b, s, heads, head_dim] by `rope` (inverse
    frequencies, cos/sin factor): at the sectioned positions when the forward being traced
    set them, else at the cache's positions."""
    inv_freq, cos_sin_factor = rope
    if sectioned is not None and sectioned.positions is not None:
        return apply_sectioned_rotary(
            qkv,
            sectioned.positions,
            inv_freq,
            sectioned.sections,
            rotating_heads,
            interleaved=sectioned.interleaved,
        )
    return apply_rotary(qkv, kv_cache, inv_freq, cos_sin_factor, rotating_heads)


def _interleaved_section_of(frequency: tirx.Expr, sections: tuple[int, ...]) -> tirx.Expr:
    """Stream of frequency index `frequency` when the streams interleave: stream s > 0
    takes the indices of residue s modulo the stream count below `streams * sections[s]`,
    stream 0 every other (transformers' Qwen3.5 `recomposition_frequencies`)."""
    streams = len(sections)
    stream: tirx.Expr = tirx.IntImm("int32", 0)
    for index in range(streams - 1, 0, -1):
        taken = tirx.all(
            tirx.floormod(frequency, streams) == index, frequency < streams * sections[index]
        )
        stream = tirx.Select(taken, tirx.IntImm("int32", index), stream)
    return stream


def _section_of(frequency: tirx.Expr, sections: tuple[int, ...]) -> tirx.Expr:
    """Index of the section that frequency index `frequency` falls in."""
    stream: tirx.Expr = tirx.IntImm("int32", len(sections) - 1)
    end = sum(sections)
    for index in range(len(sections) - 2, -1, -1):
        end -= sections[index + 1]
        stream = tirx.Select(frequency < end, tirx.IntImm("int32", index), stream)
    return stream


def apply_sectioned_rotary(
    qkv: Tensor,
    positions: Tensor,
    inv_freq: np.ndarray,
    sections: tuple[int, ...],
    rotating_heads: int,
    interleaved: bool = False,
) -> Tensor:
    """Rotate the q and k heads of `qkv` [b, s, heads, head_dim]: frequency i by the
    position stream of its section, `positions` [streams, b * s] (int32); `interleaved`:
    the sections interleave (`_interleaved_section_of`)."""
    if sum(sections) != len(inv_freq) or positions.shape[0] != len(sections):
        raise ValueError(
            f"rotary sections {sections} must cover the {len(inv_freq)} frequencies, one "
            "position stream each"
        )
    section_of = _interleaved_section_of if interleaved else _section_of
    return op.tensor_expr_op(
        lambda x, pos, freq: _rotate(
            x,
            lambda token, frequency: pos[section_of(frequency, sections), token],
            freq,
            rotating_heads,
            1.0,
        ),
        "sectioned_rotary_embedding",
        [qkv, positions, Tensor.from_const(inv_freq)],
    )
