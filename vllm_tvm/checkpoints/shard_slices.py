"""Which slice of each checkpoint tensor a tensor-parallel rank reads, and reading it.

Why here, below both the compiler and the runtime: the compiler writes these records into
the artifact's manifest (the plan itself is model_defs/tensor_parallel.py) and the runtime's
loader reads them back to slice the checkpoint, so the record and its reader are shared by
the two layers that may not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class SliceableWeights(Protocol):
    """A checkpoint that can copy out part of a tensor (checkpoints/safetensors_weights.py)."""

    def get(self, name: str) -> np.ndarray: ...

    def get_slice(self, name: str, axis: int, start: int, stop: int) -> np.ndarray: ...


@dataclass(frozen=True)
class SourceShard:
    """The slice rank r reads of one checkpoint tensor: `segments[r]` = [start, stop) along
    `axis`; `axis` None means every rank reads the whole (replicated) tensor."""

    source: str
    axis: int | None
    segments: tuple[tuple[int, int], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "axis": self.axis, "segments": self.segments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceShard:
        segments = tuple((int(start), int(stop)) for start, stop in data["segments"])
        return cls(data["source"], data["axis"], segments)


def rank_reader(
    plan: dict[str, Any], source: SliceableWeights, rank: int
) -> Callable[[str], np.ndarray]:
    """`read(name)` of rank `rank` under a manifest's tensor-parallel `plan`: the rank's
    slice of a split tensor, the whole of a replicated one."""
    if not hasattr(source, "get_slice"):
        raise ValueError(
            f"tensor parallelism reads checkpoint slices; {type(source).__name__} cannot slice "
            "(only safetensors checkpoints can)"
        )
    shards = {
        entry["source"]: SourceShard.from_dict(entry)
        for entries in plan["params"].values()
        for entry in entries
    }

    def read(name: str) -> np.ndarray:
        shard = shards.get(name)
        if shard is None or shard.axis is None:
            return source.get(name)
        start, stop = shard.segments[rank]
        return source.get_slice(name, shard.axis, start, stop)

    return read
