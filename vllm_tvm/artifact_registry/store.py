"""The local store of pulled models: `<cache>/registry/<model id>/<entry id>/`.

Why its own place in the cache: a pulled artifact is keyed by the registry entry it came
from, not by a local compile's key, and it travels with the checkpoint it runs with. A
directory appears here only by one atomic rename of a fully verified staging directory, so
whatever is in the store was checked file by file; `models list|rm` and `--offline` read it.

Layout of one placed entry: `entry.json` (model id, the index entry, where it came from and
who signed it), `artifact/` (absent when only the checkpoint was pulled, to compile
locally), and `checkpoint/<checkpoint name>` (a `.gguf` file, or a directory of files).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vllm_tvm.artifact_registry.index import (
    ArtifactEntry,
    RegistryError,
    check_model_id,
    parse_entry,
)
from vllm_tvm.artifacts.cache import cache_root

ENTRY_FILE = "entry.json"
ARTIFACT_DIR = "artifact"
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_ONLY_SUFFIX = "-checkpoint"
PARTIAL_DIR = ".partial"


def store_root() -> Path:
    return cache_root() / "registry"


def model_dir(model_id: str) -> Path:
    check_model_id(model_id)
    return store_root() / model_id.replace("/", "--")


def placed_name(entry: ArtifactEntry, with_artifact: bool) -> str:
    return entry.entry_id() + ("" if with_artifact else CHECKPOINT_ONLY_SUFFIX)


def partial_dir(model_id: str, name: str) -> Path:
    """Where files of an unfinished pull wait (kept after a transport failure, so the next
    pull resumes them; removed after any verification failure). An empty `<dir>.lock` beside
    it serialises pulls of the entry across processes."""
    return store_root() / PARTIAL_DIR / f"{model_id.replace('/', '--')}--{name}"


def single_file_checkpoint(entry: ArtifactEntry) -> bool:
    """Whether the checkpoint is one file (a `.gguf`) rather than a directory."""
    files = entry.checkpoint_files
    return len(files) == 1 and files[0].name == entry.checkpoint_name


@dataclass(frozen=True)
class PulledModel:
    """One placed entry of the store."""

    model_id: str
    entry: ArtifactEntry
    path: Path
    origin: dict[str, Any]

    @property
    def artifact_dir(self) -> Path | None:
        directory = self.path / ARTIFACT_DIR
        return directory if directory.is_dir() else None

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_DIR / self.entry.checkpoint_name

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


def place(staging: Path, model_id: str, entry: ArtifactEntry, origin: dict[str, Any]) -> Path:
    """Move the verified `staging` directory into the store in one rename; an identical
    entry already placed (a concurrent pull) wins and `staging` is dropped."""
    with_artifact = (staging / ARTIFACT_DIR).is_dir()
    record = {"model_id": model_id, "entry": asdict(entry), "origin": origin}
    record["origin"]["pulled_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (staging / ENTRY_FILE).write_text(json.dumps(record, indent=2, sort_keys=True))
    final = model_dir(model_id) / placed_name(entry, with_artifact)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, final)
    except OSError:
        if not (final / ENTRY_FILE).is_file():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return final


def pulled_models(model_id: str | None = None) -> list[PulledModel]:
    """Every placed entry (of `model_id`, when given), newest first."""
    root = store_root()
    if not root.is_dir():
        return []
    model_dirs = [model_dir(model_id)] if model_id else sorted(root.iterdir())
    found = [
        _read_placed(path)
        for directory in model_dirs
        if directory.is_dir() and not directory.name.startswith(".")
        for path in sorted(directory.iterdir())
        if (path / ENTRY_FILE).is_file()
    ]
    return sorted(found, key=lambda m: (m.path / ENTRY_FILE).stat().st_mtime, reverse=True)


def remove(model_id: str) -> list[Path]:
    """Delete every placed entry of `model_id` and the files of its unfinished pulls; the
    directories removed."""
    directory = model_dir(model_id)
    entry_pattern = "[0-9a-f]" * 16 + "*"  # an entry id, so `org` never matches `org/name`
    partials = sorted(
        store_root().joinpath(PARTIAL_DIR).glob(partial_dir(model_id, entry_pattern).name)
    )
    removed = sorted(p for p in directory.iterdir() if p.is_dir()) if directory.is_dir() else []
    removed += [p for p in partials if p.is_dir()]
    if not removed:
        raise RegistryError(f"no pulled model {model_id!r} in {store_root()}")
    shutil.rmtree(directory, ignore_errors=True)
    for path in partials:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def _read_placed(path: Path) -> PulledModel:
    record = json.loads((path / ENTRY_FILE).read_text())
    entry = parse_entry(record["model_id"], record["entry"])
    return PulledModel(record["model_id"], entry, path, record.get("origin", {}))
