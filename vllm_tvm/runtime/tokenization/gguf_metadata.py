"""Read the key/value metadata of a GGUF file, and nothing else.

Why not `gguf.GGUFReader`: it also indexes every tensor and builds one numpy view per array
element, so opening a file whose vocabulary holds 128k tokens and 280k merges takes tens of
seconds. The tokenizer needs only the metadata section at the head of the file; this reader
walks that section once, decodes string arrays in a tight loop and numeric arrays with
`numpy.frombuffer`, and stops where the tensor descriptions begin.

Format (GGUF v2/v3): magic ``GGUF``, uint32 version, uint64 tensor count, uint64 key/value
count, then per pair a length-prefixed UTF-8 key, a uint32 value type and the value.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

GGUF_MAGIC = b"GGUF"

# value type id -> (struct format char, numpy dtype) for the fixed-size scalar types
_SCALAR_TYPES: dict[int, tuple[str, str]] = {
    0: ("B", "u1"),  # UINT8
    1: ("b", "i1"),  # INT8
    2: ("H", "u2"),  # UINT16
    3: ("h", "i2"),  # INT16
    4: ("I", "u4"),  # UINT32
    5: ("i", "i4"),  # INT32
    6: ("f", "f4"),  # FLOAT32
    7: ("?", "u1"),  # BOOL
    10: ("Q", "u8"),  # UINT64
    11: ("q", "i8"),  # INT64
    12: ("d", "f8"),  # FLOAT64
}
_STRING = 8
_ARRAY = 9


class GGUFFormatError(ValueError):
    """The file is not a GGUF file this reader understands."""


class _Cursor:
    """Sequential little/big-endian decoding over a byte buffer."""

    def __init__(self, buf: memoryview, order: str) -> None:
        self.buf = buf
        self.pos = 0
        self.order = order

    def unpack(self, fmt: str) -> Any:
        full = self.order + fmt
        value = struct.unpack_from(full, self.buf, self.pos)[0]
        self.pos += struct.calcsize(full)
        return value

    def string(self) -> str:
        length = self.unpack("Q")
        start = self.pos
        self.pos += length
        return bytes(self.buf[start : self.pos]).decode("utf-8", errors="replace")

    def string_array(self, count: int) -> list[str]:
        buf, pos, out = self.buf, self.pos, []
        length_fmt = struct.Struct(self.order + "Q")
        for _ in range(count):
            (length,) = length_fmt.unpack_from(buf, pos)
            pos += 8
            out.append(bytes(buf[pos : pos + length]).decode("utf-8", errors="replace"))
            pos += length
        self.pos = pos
        return out

    def numeric_array(self, value_type: int, count: int) -> list[Any]:
        _, dtype = _SCALAR_TYPES[value_type]
        width = np.dtype(dtype).itemsize
        arr = np.frombuffer(
            self.buf, dtype=np.dtype(dtype).newbyteorder(self.order), count=count, offset=self.pos
        )
        self.pos += width * count
        if value_type == 7:
            return [bool(v) for v in arr]
        return arr.tolist()

    def value(self, value_type: int) -> Any:
        if value_type in _SCALAR_TYPES:
            return self.unpack(_SCALAR_TYPES[value_type][0])
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            item_type = self.unpack("I")
            count = self.unpack("Q")
            if item_type == _STRING:
                return self.string_array(count)
            if item_type in _SCALAR_TYPES:
                return self.numeric_array(item_type, count)
            return [self.value(item_type) for _ in range(count)]
        raise GGUFFormatError(
            f"unknown GGUF value type {value_type}; known: "
            f"{sorted([*_SCALAR_TYPES, _STRING, _ARRAY])}"
        )


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """All key/value pairs of the GGUF file at `path`, as plain Python values.

    Strings come back as `str`, arrays as lists, numbers as `int`/`float`/`bool`.
    Raises `GGUFFormatError` when the file is not GGUF version 2 or 3.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = memoryview(mm)
        try:
            return _parse(buf, str(path))
        finally:
            buf.release()


def _parse(buf: memoryview, name: str) -> dict[str, Any]:
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise GGUFFormatError(
            f"{name} is not a GGUF file (magic {bytes(buf[:4])!r}, expected b'GGUF')"
        )
    (version_le,) = struct.unpack_from("<I", buf, 4)
    # A big-endian file stores the version byte-swapped; real versions are small numbers.
    order = "<" if version_le & 0xFFFF else ">"
    cursor = _Cursor(buf, order)
    cursor.pos = 4
    version = cursor.unpack("I")
    if version not in (2, 3):
        raise GGUFFormatError(f"{name}: unsupported GGUF version {version}; supported: 2, 3")
    cursor.unpack("Q")  # tensor count: tensors are not this reader's business
    kv_count = cursor.unpack("Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.unpack("I"))
    return metadata
