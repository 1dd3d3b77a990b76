"""Where a registry lives: a local directory, an HTTP(S) base URL, or a Hugging Face repo.

Why one interface: the puller reads the index and signature and fetches content-addressed
blobs the same way wherever they come from, so verification is written once (pull.py) and
every source is only a way to move bytes. A registry is named by a string:
`hf://org/name[@revision]` (fetched with `huggingface_hub`, which honours `HF_ENDPOINT` and
`HF_TOKEN`), `http://...` / `https://...`, or a directory path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

from vllm_tvm.artifact_registry.http_download import (
    DEFAULT_ATTEMPTS,
    ProgressBar,
    download_file,
    fetch_bytes,
)
from vllm_tvm.artifact_registry.index import FileEntry, RegistryError

HF_PREFIX = "hf://"


class RegistrySource(Protocol):
    """A registry's storage, read-only."""

    description: str

    def read_small(self, name: str) -> bytes | None:
        """A small file at the registry root (index, signature); None when absent."""

    def fetch(self, file: FileEntry, destination: Path, progress: ProgressBar) -> None:
        """Put the bytes of `file`'s blob at `destination` (a partial one may be resumed)."""


def open_source(spec: str, timeout: float) -> RegistrySource:
    """The source `spec` names (`timeout`: seconds a read may wait for a byte); a directory
    that does not exist is refused by name."""
    if spec.startswith(HF_PREFIX):
        repo, _, revision = spec[len(HF_PREFIX) :].partition("@")
        return HuggingFaceSource(repo, revision or None, timeout)
    if spec.startswith(("http://", "https://")):
        return HttpSource(spec, timeout)
    root = Path(spec).expanduser()
    if not root.is_dir():
        raise RegistryError(
            f"registry {spec!r} is neither a directory, an http(s):// URL nor hf://org/name"
        )
    return LocalSource(root)


class LocalSource:
    """A registry directory on this machine (or a mounted share)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.description = str(root)

    def read_small(self, name: str) -> bytes | None:
        path = self.root / name
        return path.read_bytes() if path.is_file() else None

    def fetch(self, file: FileEntry, destination: Path, progress: ProgressBar) -> None:
        source = self.root / file.blob_path
        if not source.is_file():
            raise RegistryError(f"registry {self.root} lacks {file.blob_path} ({file.name})")
        progress.reset(total=file.size)
        with source.open("rb") as src, destination.open("wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
                progress.update(len(chunk))


class HttpSource:
    """A registry served over HTTP(S): `<base>/index.json`, `<base>/blobs/<sha256>`."""

    def __init__(self, base_url: str, timeout: float, attempts: int = DEFAULT_ATTEMPTS) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.attempts = attempts
        self.description = self.base_url

    def read_small(self, name: str) -> bytes | None:
        return fetch_bytes(f"{self.base_url}/{name}", self.timeout)

    def fetch(self, file: FileEntry, destination: Path, progress: ProgressBar) -> None:
        url = f"{self.base_url}/{file.blob_path}"
        download_file(url, destination, file.size, progress, self.timeout, self.attempts)


class HuggingFaceSource:
    """A registry stored as a Hugging Face model repo, fetched with `huggingface_hub` (its
    own resumable downloads and progress bars; `HF_ENDPOINT` selects the hub)."""

    def __init__(self, repo_id: str, revision: str | None, timeout: float) -> None:
        self.repo_id = repo_id
        self.revision = revision
        self.timeout = timeout
        self.description = f"{HF_PREFIX}{repo_id}" + (f"@{revision}" if revision else "")

    def read_small(self, name: str) -> bytes | None:
        from huggingface_hub.errors import RemoteEntryNotFoundError

        with tempfile.TemporaryDirectory(prefix="vllm-tvm-registry-") as scratch:
            try:
                path = self._download(name, Path(scratch))
            except RemoteEntryNotFoundError:
                return None
            return path.read_bytes()

    def fetch(self, file: FileEntry, destination: Path, progress: ProgressBar) -> None:
        scratch = destination.parent / f".hf-{destination.name}"
        scratch.mkdir(exist_ok=True)
        progress.reset(total=file.size)
        path = self._download(file.blob_path, scratch)
        os.replace(path, destination)
        shutil.rmtree(scratch, ignore_errors=True)
        progress.update(file.size)

    def _download(self, name: str, local_dir: Path) -> Path:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import RemoteEntryNotFoundError

        try:
            return Path(
                hf_hub_download(
                    self.repo_id,
                    name,
                    revision=self.revision,
                    local_dir=local_dir,
                    endpoint=os.environ.get("HF_ENDPOINT") or None,
                    etag_timeout=self.timeout,
                )
            )
        except RemoteEntryNotFoundError:
            raise
        except Exception as err:  # the hub client's HTTP, timeout and connection errors
            problem = f"{self.description}: fetching {name} failed: {_causes(err)}"
            raise RegistryError(problem) from err


def _causes(err: BaseException) -> str:
    """The error and what caused it (huggingface_hub wraps an HTTP 404/500 or a timeout in a
    generic "cannot find the requested files" error)."""
    parts = []
    current: BaseException | None = err
    while current is not None and len(parts) < 4:
        parts.append(f"{type(current).__name__}: {current}".split("\n")[0])
        current = current.__cause__ or current.__context__
    return " <- ".join(reversed(parts))
