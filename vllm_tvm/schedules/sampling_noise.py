"""The noise of the sampling kernel: a counter-based hash of (row key, token) and the Gumbel
noise made from it, in TIR.

Why apart: the draw's reproducibility rests on these few lines alone (the same key and
token give the same noise on every device), so they are read and changed on their own.
"""

from __future__ import annotations

from typing import Any

from tvm.script import tirx as T

NOISE_MIN, NOISE_MAX = -3.2, 23.0
"""Bounds of `gumbel` over all words (-3.13 and 22.87, rounded outwards)."""
LOW32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9
"""Multiplier spreading token indices over 32 bits before they are mixed with the key."""
DRAW_STEP = 0x632BE5AB
"""Key increment from one draw of a row to the next."""


@T.macro
def mix32(h):
    """Mix the 32-bit value in uint64 local buffer `h` in place: a bijective integer hash
    with the "lowbias32" constants of Chris Wellons' hash search.

    32-bit arithmetic carried in 64 bits and masked: TVM's LLVM backend marks uint32
    multiplies "no unsigned wrap", so a wrapping uint32 hash is undefined behaviour there
    (seen: LLVM dropped unrolled hash code). Statements, not one expression, because TVM
    inlines Let expressions and the nested hash would grow eightfold per step.
    """
    h[0] = h[0] ^ (h[0] >> T.uint64(16))
    h[0] = (h[0] * T.uint64(0x7FEB352D)) & T.uint64(LOW32)
    h[0] = h[0] ^ (h[0] >> T.uint64(15))
    h[0] = (h[0] * T.uint64(0x846CA68B)) & T.uint64(LOW32)
    h[0] = h[0] ^ (h[0] >> T.uint64(16))


def gumbel(word: Any) -> Any:
    """Gumbel noise -log(-log(u)) in float32 for u = (word + 0.5) / 2**32 in (0, 1).

    -log(u) is computed from the nearer end of (0, 1): log(u) below one half, log1p(-(1 - u))
    above, so it keeps full relative precision everywhere (u never rounds to 1, which would
    make the noise infinite); the noise is bounded by 22.9, reached at u = 1 - 2**-33.
    """
    low_half = word < T.uint32(0x80000000)
    nearer = T.if_then_else(low_half, word, ~word)
    distance = (T.Cast("float32", nearer) + T.float32(0.5)) * T.float32(2.0**-32)
    exponential = T.if_then_else(low_half, -T.log(distance), -T.log1p(-distance))
    return -T.log(exponential)
