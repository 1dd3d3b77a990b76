"""Zero-copy access to the tensors of an HF safetensors checkpoint.

The format is an 8-byte header length, a JSON header (name -> dtype, shape, byte offsets)
and the raw data; mapping the file and viewing each tensor with numpy keeps resident memory
at what is actually used. This is read directly instead of through `safetensors.numpy`
because numpy cannot hold bfloat16 there, while `ml_dtypes` (a TVM dependency) can.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}


class CheckpointFormatError(ValueError):
    """A safetensors file that cannot be read as such."""


@dataclass(frozen=True)
class _TensorRecord:
    file: Path
    dtype: np.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


def _read_header(path: Path) -> tuple[int, dict]:
    with path.open("rb") as stream:
        raw_len = stream.read(8)
        if len(raw_len) != 8:
            raise CheckpointFormatError(f"{path} is too short to be a safetensors file")
        (header_len,) = struct.unpack("<Q", raw_len)
        if header_len > path.stat().st_size - 8:
            raise CheckpointFormatError(f"{path} has a header length beyond the file's end")
        try:
            header = json.loads(stream.read(header_len))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CheckpointFormatError(f"{path} has a malformed header: {err}") from err
    return 8 + header_len, header


class SafetensorsWeights:
    """Tensors of every `*.safetensors` file in a model directory, by HF name.

    `get_slice` copies out one rank's part of a tensor (tensor parallelism) and counts the
    bytes it copied in `slice_bytes_read`, so a sharded load can show it read no more.
    """

    def __init__(self, model_dir: str | Path) -> None:
        self.model_dir = Path(model_dir)
        self.slice_bytes_read = 0
        files = sorted(self.model_dir.glob("*.safetensors"))
        if not files:
            raise CheckpointFormatError(f"no *.safetensors files in {self.model_dir}")
        self._records: dict[str, _TensorRecord] = {}
        self._maps: dict[Path, np.memmap] = {}
        for path in files:
            data_start, header = _read_header(path)
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                dtype = _DTYPES.get(info["dtype"])
                if dtype is None:
                    raise CheckpointFormatError(
                        f"tensor {name} in {path} has unsupported dtype {info['dtype']}; "
                        "supported: " + ", ".join(_DTYPES)
                    )
                begin, end = info["data_offsets"]
                record = _TensorRecord(
                    path, dtype, tuple(info["shape"]), data_start + begin, data_start + end
                )
                expected = int(np.prod(record.shape, dtype=np.int64)) * dtype.itemsize
                if end - begin != expected or record.end > path.stat().st_size:
                    raise CheckpointFormatError(
                        f"tensor {name} in {path} is truncated or has inconsistent offsets"
                    )
                self._records[name] = record

    def names(self) -> list[str]:
        """All tensor names."""
        return list(self._records)

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of one tensor."""
        return self._record(name).shape

    def get(self, name: str) -> np.ndarray:
        """A read-only view of one tensor, in its stored dtype."""
        record = self._record(name)
        return (
            self._mapped(record)[record.begin : record.end].view(record.dtype).reshape(record.shape)
        )

    def get_slice(self, name: str, axis: int, start: int, stop: int) -> np.ndarray:
        """A copy of entries [start, stop) along `axis` (0: rows, one contiguous byte range;
        1: columns of a matrix, a range of each row), reading only those bytes."""
        record = self._record(name)
        if axis not in (0, 1) or (axis == 1 and len(record.shape) != 2):
            raise ValueError(f"cannot slice {name} {list(record.shape)} along axis {axis}")
        if not 0 <= start < stop <= record.shape[axis]:
            raise ValueError(f"slice [{start}, {stop}) out of range for {name} axis {axis}")
        mapped = self._mapped(record)
        row_bytes = int(np.prod(record.shape[1:], dtype=np.int64)) * record.dtype.itemsize
        if axis == 0:
            begin = record.begin + start * row_bytes
            rows = mapped[begin : record.begin + stop * row_bytes]
            part = rows.view(record.dtype).reshape((stop - start, *record.shape[1:])).copy()
        else:
            matrix = mapped[record.begin : record.end].reshape(record.shape[0], row_bytes)
            item = record.dtype.itemsize
            columns = matrix[:, start * item : stop * item]
            part = np.ascontiguousarray(columns).view(record.dtype)
        self.slice_bytes_read += part.nbytes
        return part

    def _mapped(self, record: _TensorRecord) -> np.memmap:
        mapped = self._maps.get(record.file)
        if mapped is None:
            mapped = np.memmap(record.file, dtype=np.uint8, mode="r")
            self._maps[record.file] = mapped
        return mapped

    def _record(self, name: str) -> _TensorRecord:
        record = self._records.get(name)
        if record is None:
            raise KeyError(f"checkpoint {self.model_dir} has no tensor '{name}'")
        return record
