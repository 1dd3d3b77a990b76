"""Lay a checkpoint out as the Hugging Face hub cache does (what `huggingface-cli download`
leaves behind), for tests of model ids resolved offline."""

from __future__ import annotations

import shutil
from pathlib import Path

REVISION = "0123456789abcdef0123456789abcdef01234567"


def add_to_hf_cache(hub_cache: Path, model_id: str, checkpoint: Path) -> Path:
    """Put `checkpoint` (a directory's files, or one file) into `hub_cache` as `model_id` at
    refs/main; the snapshot directory."""
    repo = hub_cache / ("models--" + model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    files = sorted(checkpoint.iterdir()) if checkpoint.is_dir() else [checkpoint]
    for source in files:
        if source.is_file():
            shutil.copy(source, snapshot / source.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION, encoding="utf-8")
    return snapshot
