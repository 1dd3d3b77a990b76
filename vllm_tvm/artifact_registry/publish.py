"""Publish an artifact and its checkpoint into a registry directory, and re-sign the index.

Why a directory: the same tree is served as is by any static HTTP server or uploaded as a
Hugging Face repo, so publishing writes files only: content-addressed blobs (written once,
by rename), the canonical index, and its detached signature, written last so a reader never
sees a new index with an old signature for longer than one rename.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from vllm_tvm.artifact_registry.index import (
    BLOB_DIR,
    FILE_NAME,
    INDEX_NAME,
    SIGNATURE_NAME,
    ArtifactEntry,
    FileEntry,
    RegistryError,
    RegistryIndex,
    parse_index,
)
from vllm_tvm.artifact_registry.signing import sign
from vllm_tvm.artifacts.manifest import MANIFEST_NAME, read_manifest, sha256_of_file


def checkpoint_files(checkpoint: Path) -> list[Path]:
    """The files a checkpoint consists of: the `.gguf` file itself, or every visible file at
    the top of a Hugging Face directory (config, weights, tokenizer, generation config)."""
    if checkpoint.is_file():
        return [checkpoint]
    if not checkpoint.is_dir():
        raise RegistryError(f"checkpoint {checkpoint} does not exist")
    files = sorted(p for p in checkpoint.iterdir() if p.is_file() and not p.name.startswith("."))
    bad = [p.name for p in files if not FILE_NAME.fullmatch(p.name)]
    if bad:
        raise RegistryError(f"checkpoint file names not publishable: {', '.join(bad)}")
    return files


def publish(
    artifact_dir: Path,
    checkpoint: Path,
    model_id: str,
    registry_dir: Path,
    signing_key: Path,
    features: dict[str, Any],
    weight_format: str,
) -> tuple[ArtifactEntry, bool]:
    """Add (or replace, when one with the same compatibility exists) the entry of
    `artifact_dir` + `checkpoint` under `model_id`; returns it and whether it replaced one."""
    manifest = read_manifest(artifact_dir, verify=True)
    artifact_paths = [artifact_dir / MANIFEST_NAME, *(artifact_dir / n for n in manifest.files)]
    registry_dir.mkdir(parents=True, exist_ok=True)
    entry = ArtifactEntry(
        target=manifest.target,
        target_kind=manifest.target_kind,
        features=features,
        dtype=manifest.dtype,
        weight_format=weight_format,
        tvm_version=manifest.tvm_version,
        config_hash=manifest.config_hash,
        architecture=manifest.architecture,
        artifact_files=[_store_blob(path, registry_dir) for path in artifact_paths],
        checkpoint_name=checkpoint.name,
        checkpoint_files=[_store_blob(path, registry_dir) for path in checkpoint_files(checkpoint)],
    )
    index_path = registry_dir / INDEX_NAME
    index = parse_index(index_path.read_bytes()) if index_path.is_file() else RegistryIndex()
    replaced = index.add(model_id, entry)
    data = index.to_bytes()
    signature = sign(signing_key, data)
    _write_atomically(index_path, data)
    _write_atomically(registry_dir / SIGNATURE_NAME, signature)
    return entry, replaced


def _store_blob(path: Path, registry_dir: Path) -> FileEntry:
    file = FileEntry(path.name, path.stat().st_size, sha256_of_file(path))
    blob = registry_dir / file.blob_path
    if not blob.is_file():
        (registry_dir / BLOB_DIR).mkdir(exist_ok=True)
        partial = blob.with_name(blob.name + f".{os.getpid()}.partial")
        shutil.copyfile(path, partial)
        os.replace(partial, blob)
    return file


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + f".{os.getpid()}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)
