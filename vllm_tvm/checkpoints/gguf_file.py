"""A GGUF file's header (metadata and tensor descriptions), read fast, once per process.

Why not `gguf.GGUFReader`: it builds one numpy view per element of every metadata array, so
opening a file whose vocabulary holds 49k tokens and merges takes seconds (128k tokens and
280k merges: tens of seconds), and the config, the weights and the tokenizer each opened the
file again. This reader walks the header once, decodes string arrays in a tight loop and
numeric arrays with `numpy.frombuffer`, keeps each key's value type (float32 values are shown
as their decimal), and gives each tensor's bytes as a view of one memory map. `open_gguf`
keeps the opened file per (path, modification time, size), so every reader in a process
shares one parse.

Format (GGUF v2/v3): magic ``GGUF``, uint32 version, uint64 tensor count, uint64 key/value
count, then per pair a length-prefixed UTF-8 key, a uint32 value type and the value; then per
tensor its name, uint32 dimension count, uint64 dimensions (innermost first), uint32 ggml
type and uint64 offset into the data section, which starts at the next multiple of
``general.alignment`` (32 when absent).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
FLOAT32 = 6
"""The value type id of float32 metadata."""

# value type id -> (struct format char, numpy dtype) for the fixed-size scalar types
_SCALAR_TYPES: dict[int, tuple[str, str]] = {
    0: ("B", "u1"),  # UINT8
    1: ("b", "i1"),  # INT8
    2: ("H", "u2"),  # UINT16
    3: ("h", "i2"),  # INT16
    4: ("I", "u4"),  # UINT32
    5: ("i", "i4"),  # INT32
    FLOAT32: ("f", "f4"),
    7: ("?", "u1"),  # BOOL
    10: ("Q", "u8"),  # UINT64
    11: ("q", "i8"),  # INT64
    12: ("d", "f8"),  # FLOAT64
}
_STRING = 8
_ARRAY = 9

_ELEMENT_DTYPES: dict[GGMLQuantizationType, str] = {
    GGMLQuantizationType.F16: "f2",
    GGMLQuantizationType.F32: "f4",
    GGMLQuantizationType.F64: "f8",
    GGMLQuantizationType.I8: "i1",
    GGMLQuantizationType.I16: "i2",
    GGMLQuantizationType.I32: "i4",
    GGMLQuantizationType.I64: "i8",
}
"""ggml types stored one plain number per element; every other type is stored as blocks."""


class GGUFFormatError(ValueError):
    """The file is not a GGUF file this reader understands."""


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor's description and its bytes in the file.

    ``shape`` is in ggml order (innermost dimension first). ``data`` is a read-only view of
    the memory map: typed numbers in numpy order for plain types, else uint8 rows of blocks.
    """

    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class GGUFFile:
    """A parsed GGUF header: metadata values, their value types and the tensors."""

    metadata: dict[str, Any]
    value_types: dict[str, int]
    tensors: list[GGUFTensor]


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """The parsed header of the GGUF file at ``path``, shared by every caller in the process
    until the file changes (another modification time or size)."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _open_gguf(resolved, stat.st_mtime_ns, stat.st_size)


def read_gguf_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """All key/value pairs of the GGUF file at ``path``, as plain Python values (strings as
    `str`, arrays as lists, numbers as `int`/`float`/`bool`).

    Raises `GGUFFormatError` when the file is not GGUF version 2 or 3.
    """
    return dict(open_gguf(path).metadata)


@lru_cache(maxsize=4)
def _open_gguf(path: Path, mtime_ns: int, size: int) -> GGUFFile:
    """Parse once per file version; the memory map lives as long as the tensor views."""
    with open(path, "rb") as f:
        if size == 0:
            raise GGUFFormatError(f"{path} is not a GGUF file (it is empty)")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return _parse(np.frombuffer(mapped, dtype=np.uint8), str(path))


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


def _parse(data: np.ndarray, name: str) -> GGUFFile:
    buf = memoryview(data)
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
    tensor_count = cursor.unpack("Q")
    kv_count = cursor.unpack("Q")
    metadata: dict[str, Any] = {}
    value_types: dict[str, int] = {}
    for _ in range(kv_count):
        key = cursor.string()
        value_types[key] = cursor.unpack("I")
        metadata[key] = cursor.value(value_types[key])
    infos = [_tensor_info(cursor) for _ in range(tensor_count)]
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    data_start = -(-cursor.pos // alignment) * alignment
    tensors = [_tensor(data, order, data_start, *info) for info in infos]
    return GGUFFile(metadata, value_types, tensors)


def _tensor_info(cursor: _Cursor) -> tuple[str, tuple[int, ...], int, int]:
    """(name, ggml-order shape, ggml type id, offset in the data section) of the next tensor."""
    name = cursor.string()
    n_dims = cursor.unpack("I")
    shape = tuple(cursor.unpack("Q") for _ in range(n_dims))
    return name, shape, cursor.unpack("I"), cursor.unpack("Q")


def _tensor(
    data: np.ndarray,
    order: str,
    data_start: int,
    name: str,
    shape: tuple[int, ...],
    type_id: int,
    offset: int,
) -> GGUFTensor:
    """The tensor `name` as a view of `data`, shaped as `gguf.GGUFReader` shapes it."""
    ggml_type = GGMLQuantizationType(type_id)
    n_elements = int(np.prod(shape))
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    numpy_shape = tuple(reversed(shape))
    start = data_start + offset
    element_dtype = _ELEMENT_DTYPES.get(ggml_type)
    if element_dtype is not None:
        dtype = np.dtype(element_dtype).newbyteorder(order)
        view = data[start : start + n_elements * dtype.itemsize].view(dtype)
    else:
        if numpy_shape[-1] % block_size:
            raise GGUFFormatError(
                f"tensor {name!r}: row size {numpy_shape[-1]} is not a multiple of the "
                f"{ggml_type.name} block size {block_size}"
            )
        numpy_shape = (*numpy_shape[:-1], numpy_shape[-1] // block_size * type_size)
        view = data[start : start + n_elements * type_size // block_size]
    return GGUFTensor(name, ggml_type, shape, view.reshape(numpy_shape))
