"""Fused weights whose checkpoint tensors are stored in different types, kept quantized in parts.

Why this exists: the model fuses q/k/v (and gate/up) into one matrix, concatenated from
several checkpoint tensors. llama.cpp's mixed presets (Q4_K_M, Q5_K_M...) store those
tensors in different types in every layer (e.g. q/k Q5_0 beside v Q8_0), and one fused
matmul reads one block format, so such a weight would have to be dequantized to fp32 at
load. Instead it is kept as *parts*: each run of consecutive sources of one stored type is
a quantized weight of its own (its rows of the fused matrix), and the fused product is the
concatenation of the parts' products. Nothing is requantized, so the values are the file's.

A part is named `<weight>.sources_<first>_<stop>`: sources `first` up to (not including)
`stop` of the fused weight. The compile plan (compiler/weight_plan.py) names the parts, the
model (model_defs/quant_linear.py) builds one quantized matmul per part, and the manifest
records each part's planes with exactly its sources, so the runtime loads them like any
other quantized weight.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

WeightSources = Callable[[str], tuple[list[str], int]]

_PART = re.compile(r"^(?P<weight>.+)\.sources_(?P<first>\d+)_(?P<stop>\d+)$")


def part_name(weight: str, first: int, stop: int) -> str:
    """The name of the part of `weight` made of its sources `first` .. `stop` - 1."""
    return f"{weight}.sources_{first}_{stop}"


def parse_part(name: str) -> tuple[str, int, int] | None:
    """(fused weight, first source, stop source) of a part name; None for any other name."""
    match = _PART.match(name)
    if match is None:
        return None
    return match["weight"], int(match["first"]), int(match["stop"])


def same_type_runs(types: Sequence[str | None]) -> list[tuple[int, int]]:
    """(first, stop) of each run of consecutive equal types, in order."""
    runs: list[tuple[int, int]] = []
    for index, stored in enumerate(types):
        if runs and types[runs[-1][0]] == stored:
            runs[-1] = (runs[-1][0], index + 1)
        else:
            runs.append((index, index + 1))
    return runs


def part_sources(name: str, weight_sources: WeightSources) -> tuple[list[str], int]:
    """The checkpoint tensors (and concatenation axis) of parameter or part `name`."""
    part = parse_part(name)
    if part is None:
        return weight_sources(name)
    weight, first, stop = part
    sources, axis = weight_sources(weight)
    return sources[first:stop], axis
