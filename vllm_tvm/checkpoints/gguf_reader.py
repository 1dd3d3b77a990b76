"""Opening a GGUF file and reading its metadata keys, as the checkpoint readers need them.

Why apart: the config translation, the tensor-name table and the rope-scaling recovery all
read metadata keys the same way (a missing key named in the error, float32 values given as
the decimal the original config.json had), and the file is opened once and shared.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from vllm_tvm.checkpoints.gguf_file import FLOAT32, GGUFFile
from vllm_tvm.checkpoints.gguf_file import open_gguf as open_gguf_path

GGUFSource = str | os.PathLike[str] | GGUFFile


class _Missing:
    """Sentinel type: a metadata key with no default must be present."""


MISSING: Any = _Missing()


def open_gguf(source: GGUFSource) -> GGUFFile:
    """The parsed header of ``source`` (a path; parsed once per process), or ``source``
    itself when it is already one."""
    if isinstance(source, GGUFFile):
        return source
    return open_gguf_path(source)


def metadata_field(reader: GGUFFile, name: str, default: Any = MISSING) -> Any:
    """The decoded value of metadata key ``name`` (``default`` when absent, if given)."""
    if name not in reader.metadata:
        if isinstance(default, _Missing):
            raise ValueError(f"GGUF file lacks the metadata key {name!r}")
        return default
    value = reader.metadata[name]
    if reader.value_types[name] == FLOAT32:
        return float32_decimal(value)
    return value


def float32_decimal(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as ``value`` (1e-05, not 9.99e-06)."""
    return float(np.format_float_scientific(np.float32(value), unique=True))
