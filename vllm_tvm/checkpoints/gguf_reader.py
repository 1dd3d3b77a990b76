"""Opening a GGUF file and reading its metadata keys, as the checkpoint readers need them.

Why apart: the config translation, the tensor-name table and the rope-scaling recovery all
read metadata keys the same way (a missing key named in the error, float32 values given as
the decimal the original config.json had), and the file is opened once and shared.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType

GGUFSource = str | os.PathLike[str] | GGUFReader


class _Missing:
    """Sentinel type: a metadata key with no default must be present."""


MISSING: Any = _Missing()


def open_gguf(source: GGUFSource) -> GGUFReader:
    """Return a ``GGUFReader`` for ``source`` (a path), or ``source`` itself if it is one.

    Opening parses every metadata field (tokenizer vocabularies included), which takes
    seconds for real models, so callers that need both the config and the weights should
    open once and pass the reader to both.
    """
    if isinstance(source, GGUFReader):
        return source
    return GGUFReader(source, "r")


def metadata_field(reader: GGUFReader, name: str, default: Any = MISSING) -> Any:
    """The decoded value of metadata key ``name`` (``default`` when absent, if given)."""
    field = reader.get_field(name)
    if field is None:
        if isinstance(default, _Missing):
            raise ValueError(f"GGUF file lacks the metadata key {name!r}")
        return default
    value = field.contents()
    if field.types and field.types[0] == GGUFValueType.FLOAT32:
        return float32_decimal(value)
    return value


def float32_decimal(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as ``value`` (1e-05, not 9.99e-06)."""
    return float(np.format_float_scientific(np.float32(value), unique=True))
