"""The planes of a GGUF checkpoint's quantized weights, repacked once and kept in one file
that later starts memory-map.

Why: repacking rearranges every quantized weight's bits (checkpoints/gguf_repack.py) at
each load, about 0.3-0.8 s of a start for a 135M-parameter Q4_1 file. The planes depend only
on the file, on the artifact's parameter layout (which weights are fused) and on the
repacking code, so an entry keyed by all three (artifacts/derived_cache.py) is valid until
one of them changes. On a miss the planes are written one parameter at a time (no more
memory than repacking takes anyway) and then read back from the stored entry; when the
entry cannot be stored, or the source is not a GGUF file, the planes are repacked in memory.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from vllm_tvm.artifacts.derived_cache import code_version, read_entry, write_entry
from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.checkpoints import gguf_repack, gguf_weights, weight_formats
from vllm_tvm.checkpoints.weight_formats import FLOAT
from vllm_tvm.runtime.weights import quantized_params
from vllm_tvm.runtime.weights.loader import WeightSource
from vllm_tvm.runtime.weights.quantized_params import QuantizedPlanes

KIND = "gguf-planes"
DATA_FILE = "planes.bin"
LAYOUT_FILE = "layout.json"
_ALIGNMENT = 64
_REPACKERS = (gguf_repack, gguf_weights, weight_formats, quantized_params)


def quantized_planes(
    entries: Sequence[ParamEntry], source: WeightSource
) -> Callable[[ParamEntry], np.ndarray]:
    """A lookup of the plane of each quantized parameter in `entries` (checked against the
    checkpoint by `check_quantized_sources` beforehand): from the cache for a GGUF file,
    else repacked as asked."""
    quantized = [entry for entry in entries if entry.format != FLOAT]
    path = getattr(source, "path", None)
    if not quantized or path is None or not hasattr(source, "raw"):
        return QuantizedPlanes(source).get
    version = entry_version(quantized)
    entry_dir = read_entry(KIND, path, version)
    if entry_dir is None:
        entry_dir = write_entry(KIND, path, version, lambda d: _write(quantized, source, d))
    arrays = _read(quantized, entry_dir) if entry_dir is not None else None
    if arrays is None:
        return QuantizedPlanes(source).get
    return lambda entry: arrays[entry.name]


def entry_version(quantized: Sequence[ParamEntry]) -> str:
    """The cache key's version for these parameters: the repacking code and their layout."""
    layout = json.dumps([dataclasses.asdict(entry) for entry in quantized])
    return code_version([module.__file__ or "" for module in _REPACKERS], layout)


def _write(quantized: Sequence[ParamEntry], source: WeightSource, directory: Path) -> None:
    planes = QuantizedPlanes(source)
    layout = []
    with open(directory / DATA_FILE, "wb") as data:
        for entry in quantized:
            array = np.ascontiguousarray(planes.get(entry))
            data.write(b"\0" * (-data.tell() % _ALIGNMENT))
            layout.append([entry.name, data.tell(), array.nbytes])
            data.write(array.tobytes())
    (directory / LAYOUT_FILE).write_text(json.dumps(layout), encoding="utf-8")


def _read(quantized: Sequence[ParamEntry], directory: Path) -> dict[str, np.ndarray] | None:
    """The planes of a stored entry, as copy-on-write views of its memory-mapped data; None when
    the layout does not describe exactly these parameters."""
    try:
        layout = json.loads((directory / LAYOUT_FILE).read_text(encoding="utf-8"))
        data = np.memmap(directory / DATA_FILE, dtype=np.uint8, mode="c")
        arrays = {}
        for entry, (name, offset, nbytes) in zip(quantized, layout, strict=True):
            dtype = np.dtype(entry.dtype)
            if name != entry.name or nbytes != dtype.itemsize * int(np.prod(entry.shape)):
                return None
            arrays[name] = data[offset : offset + nbytes].view(dtype).reshape(entry.shape)
    except (OSError, ValueError, TypeError):
        return None
    return arrays
