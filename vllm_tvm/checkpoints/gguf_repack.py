"""GGUF blocks rearranged into the planes that the fused dequantizing matmul reads.

Why this exists: a ggml block interleaves its scales with its values in an order chosen
for llama.cpp's SIMD code (Q4_1: fp16 d, fp16 m, then 16 bytes whose low nibbles hold
values 0-15 and high nibbles values 16-31; Q6_K splits each value's low four and high two
bits over two arrays in quarter-block order), which a TIR kernel would index with awkward
per-block arithmetic. The planes of checkpoints/weight_formats.py hold each field in value
order: scales as `[rows, blocks]` arrays, int8 values as they are, and bit fields packed
into uint32 words (value `v` of a `b`-bit field in bits `b * (v % (32 / b))` of word
`v // (32 / b)`). Only bits move (vectorised numpy slicing, shifts and masks); no value is
ever turned into a float, so the kernel sees exactly the file's numbers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from vllm_tvm.checkpoints.gguf_weights import RawTensor
from vllm_tvm.checkpoints.weight_formats import QuantFormat

Bytes = npt.NDArray[np.uint8]


def _float16(blocks: Bytes, offset: int) -> np.ndarray:
    """The fp16 field at byte `offset` of every block: [rows, blocks]."""
    return np.ascontiguousarray(blocks[:, :, offset : offset + 2]).view(np.float16)[..., 0]


def _flat(values: np.ndarray) -> np.ndarray:
    """[rows, ...] -> [rows, everything else], contiguous."""
    return np.ascontiguousarray(values).reshape(values.shape[0], -1)


def _pack(values: Bytes, width: int) -> np.ndarray:
    """`width`-bit values [rows, n] (value order) -> uint32 words [rows, n * width / 32]."""
    per_byte = 8 // width
    packed = values[:, 0::per_byte].copy()
    for j in range(1, per_byte):
        packed |= values[:, j::per_byte] << (j * width)
    return np.ascontiguousarray(packed).view(np.uint32)


def _split_nibbles(nibble_bytes: Bytes) -> Bytes:
    """ggml's 4-bit groups -> values in order: in each group of G bytes (last axis), the
    low nibbles are the group's first G values and the high nibbles the next G."""
    return _flat(np.concatenate([nibble_bytes & 0x0F, nibble_bytes >> 4], axis=-1))


def _q8_0(blocks: Bytes) -> dict[str, np.ndarray]:
    return {"qs": _flat(blocks[:, :, 2:34]).view(np.int8), "d": _float16(blocks, 0)}


def _q4_0(blocks: Bytes) -> dict[str, np.ndarray]:
    return {"qs": _pack(_split_nibbles(blocks[:, :, 2:18]), 4), "d": _float16(blocks, 0)}


def _q4_1(blocks: Bytes) -> dict[str, np.ndarray]:
    return {
        "qs": _pack(_split_nibbles(blocks[:, :, 4:20]), 4),
        "d": _float16(blocks, 0),
        "m": _float16(blocks, 2),
    }


def _uint32(blocks: Bytes, offset: int) -> np.ndarray:
    """The little-endian uint32 field at byte `offset` of every block: [rows, blocks]."""
    return np.ascontiguousarray(blocks[:, :, offset : offset + 4]).view(np.uint32)[..., 0]


def _q5_0(blocks: Bytes) -> dict[str, np.ndarray]:
    # qh: bit v of the block's uint32 is the fifth bit of value v, already in value order.
    return {
        "qs": _pack(_split_nibbles(blocks[:, :, 6:22]), 4),
        "qh": _uint32(blocks, 2),
        "d": _float16(blocks, 0),
    }


def _q5_0_as_q8_0(blocks: Bytes) -> dict[str, np.ndarray]:
    """Q5_0 blocks in Q8_0's planes: each value's int8 q - 16 (low nibble + 16 * fifth bit,
    less 16) and the block's fp16 d, so d * qs is the file's d * (q - 16) exactly."""
    nibbles = _split_nibbles(blocks[:, :, 6:22]).reshape(blocks.shape[0], blocks.shape[1], 32)
    fifth = (_uint32(blocks, 2)[..., None] >> np.arange(32, dtype=np.uint32)) & 1
    values = nibbles.astype(np.int16) + 16 * fifth.astype(np.int16) - 16
    return {"qs": _flat(values.astype(np.int8)), "d": _float16(blocks, 0)}


def _q5_1(blocks: Bytes) -> dict[str, np.ndarray]:
    return {
        "qs": _pack(_split_nibbles(blocks[:, :, 8:24]), 4),
        "qh": _uint32(blocks, 4),
        "d": _float16(blocks, 0),
        "m": _float16(blocks, 2),
    }


def _k_scales(blocks: Bytes) -> dict[str, np.ndarray]:
    """d, dmin and the eight 6-bit (scale, min) pairs at bytes 0..15 of Q4_K/Q5_K blocks.

    Bytes 4..7 hold scales 0-3 (low 6 bits) and the top bits of scales 4-7; bytes 8..11
    mins 0-3 and the top bits of mins 4-7; bytes 12..15 the low nibbles of scales 4-7
    (low) and mins 4-7 (high).
    """
    low, mid, high = blocks[:, :, 4:8], blocks[:, :, 8:12], blocks[:, :, 12:16]
    scales = np.concatenate([low & 63, (high & 15) | ((low >> 6) << 4)], axis=-1)
    mins = np.concatenate([mid & 63, (high >> 4) | ((mid >> 6) << 4)], axis=-1)
    return {
        "d": _float16(blocks, 0),
        "dmin": _float16(blocks, 2),
        "sc": _flat(scales),
        "mn": _flat(mins),
    }


def _q4_k_values(nibble_bytes: Bytes) -> Bytes:
    """Q4_K/Q5_K low nibbles (128 bytes per block: 32 bytes per 64 values) in value order."""
    rows = nibble_bytes.shape[0]
    return _split_nibbles(nibble_bytes.reshape(rows, -1, 32))


def _q4_k(blocks: Bytes) -> dict[str, np.ndarray]:
    return {"qs": _pack(_q4_k_values(blocks[:, :, 16:144]), 4), **_k_scales(blocks)}


def _bits_by_32(mask_bytes: Bytes) -> np.ndarray:
    """Q5_K's and Q3_K's 32-byte bit masks (bit s of byte l: value 32 s + l), packed."""
    bits = (mask_bytes[:, :, None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1
    return _pack(_flat(bits), 1)


def _crumbs(crumb_bytes: Bytes) -> np.ndarray:
    """Q2_K's and Q3_K's 2-bit values (64 bytes per block: in each 32 bytes, bits 2 j of
    byte l hold value 32 j + l of 128), packed in value order."""
    groups = crumb_bytes.reshape(crumb_bytes.shape[0], -1, 1, 32)
    values = (groups >> (2 * np.arange(4, dtype=np.uint8))[:, None]) & 3
    return _pack(_flat(values), 2)


def _q2_k(blocks: Bytes) -> dict[str, np.ndarray]:
    # Bytes 0..15: scale (low nibble) and min (high nibble) of each 16 values.
    scales = blocks[:, :, 0:16]
    return {
        "qs": _crumbs(blocks[:, :, 16:80]),
        "d": _float16(blocks, 80),
        "dmin": _float16(blocks, 82),
        "sc": _flat(scales & 15),
        "mn": _flat(scales >> 4),
    }


def _q3_k(blocks: Bytes) -> dict[str, np.ndarray]:
    # Sixteen 6-bit scales, stored biased by 32: the low nibbles of scales i and i + 8 in
    # byte 96 + i (i < 8), the top two bits of scale 4 m + k at bits 2 m of byte 104 + k.
    low, top = blocks[:, :, 96:104], blocks[:, :, 104:108]
    nibbles = np.concatenate([low & 15, low >> 4], axis=-1)
    tops = np.concatenate([(top >> (2 * m)) & 3 for m in range(4)], axis=-1)
    biased = _flat(nibbles | (tops << 4)).astype(np.int16)
    return {
        "qs": _crumbs(blocks[:, :, 32:96]),
        "qh": _bits_by_32(blocks[:, :, 0:32]),
        "sc": (biased - 32).astype(np.int8),
        "d": _float16(blocks, 108),
    }


def _q5_k(blocks: Bytes) -> dict[str, np.ndarray]:
    return {
        "qs": _pack(_q4_k_values(blocks[:, :, 48:176]), 4),
        "qh": _bits_by_32(blocks[:, :, 16:48]),
        **_k_scales(blocks),
    }


def _q6_k_fields(blocks: Bytes) -> tuple[Bytes, Bytes]:
    """Q6_K's low nibbles and two high bits of each value, in value order: [rows, n] each."""
    # Per 128 values: ql bytes l (l < 32) hold values l (low nibble) and 64 + l (high),
    # bytes 32 + l values 32 + l and 96 + l; qh byte l holds the two high bits of values
    # l, 32 + l, 64 + l, 96 + l at bits 0, 2, 4, 6.
    rows = blocks.shape[0]
    ql = blocks[:, :, 0:128].reshape(rows, -1, 2, 32)
    qh = blocks[:, :, 128:192].reshape(rows, -1, 32)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=-2)  # quarters 0, 1, 2, 3
    high = np.stack([(qh >> shift) & 3 for shift in (0, 2, 4, 6)], axis=-2)
    return _flat(low), _flat(high)


def _q6_k_scales(blocks: Bytes) -> dict[str, np.ndarray]:
    return {"sc": _flat(blocks[:, :, 192:208]).view(np.int8), "d": _float16(blocks, 208)}


def _q6_k(blocks: Bytes) -> dict[str, np.ndarray]:
    low, high = _q6_k_fields(blocks)
    return {"qs": _pack(low, 4), "qh": _pack(high, 2), **_q6_k_scales(blocks)}


def _q6_k_as_int8(blocks: Bytes) -> dict[str, np.ndarray]:
    """Q6_K blocks with each value as the int8 q - 32 (scales as Q6_K's)."""
    low, high = _q6_k_fields(blocks)
    values = low.astype(np.int16) + 16 * high.astype(np.int16) - 32
    return {"qs": values.astype(np.int8), **_q6_k_scales(blocks)}


def _f16(blocks: Bytes) -> dict[str, np.ndarray]:
    return {"w": _flat(blocks).view(np.float16)}


def _bf16(blocks: Bytes) -> dict[str, np.ndarray]:
    return {"w": _flat(blocks).view(np.uint16)}


_REPACK: dict[str, Callable[[Bytes], dict[str, np.ndarray]]] = {
    "q8_0": _q8_0,
    "q4_0": _q4_0,
    "q4_1": _q4_1,
    "q5_0": _q5_0,
    "q5_0_as_q8_0": _q5_0_as_q8_0,
    "q5_1": _q5_1,
    "q2_k": _q2_k,
    "q3_k": _q3_k,
    "q4_k": _q4_k,
    "q5_k": _q5_k,
    "q6_k": _q6_k,
    "q6_k_as_int8": _q6_k_as_int8,
    "f16": _f16,
    "bf16": _bf16,
}


def repack(raw: RawTensor, fmt: QuantFormat) -> dict[str, np.ndarray]:
    """The planes of `fmt` (plane name -> array) holding the 2-D weight `raw`.

    Raises ValueError when `raw` is not stored in `fmt`'s ggml type or is not 2-D.
    """
    if sys.byteorder != "little":
        raise ValueError("quantized GGUF weights need a little-endian host; got a big-endian one")
    if raw.quant_type.name != fmt.ggml_type:
        raise ValueError(
            f"a {raw.quant_type.name} tensor cannot be repacked as {fmt.name}; "
            f"it needs {fmt.ggml_type}"
        )
    if len(raw.shape) != 2:
        raise ValueError(f"quantized weights are 2-D; got shape {list(raw.shape)}")
    rows, columns = raw.shape
    blocks = raw.data.reshape(rows, columns // fmt.block_size, -1)
    planes = _REPACK[fmt.name](blocks)
    return {plane.name: planes[plane.name] for plane in fmt.planes}
