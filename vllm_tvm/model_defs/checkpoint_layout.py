"""How one checkpoint of an architecture names its tensors, when checkpoints differ.

Why: the same architecture is saved under different names (Gemma 3's vision tower is
`vision_tower.vision_model.` in the released checkpoints and `vision_tower.` as
transformers 5 saves it). The compiler reads the checkpoint's names once, takes the
matching sources for the manifest, and puts the layout's name in the cache key, so two
checkpoints of one config never share an artifact whose sources fit only one of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointLayout:
    name: str
    """Part of the artifact's cache key."""
    sources: Callable[[str], tuple[list[str], int]]
    """Parameter name -> (checkpoint tensors concatenated along the axis, axis)."""
