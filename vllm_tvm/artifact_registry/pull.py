"""Pull a prebuilt artifact: signed index -> the entry that fits -> parallel downloads ->
every byte verified -> one atomic placement in the store.

Why in this order: a library is code and a weight file is mmap'ed, so nothing fetched may
reach a place the runtime reads from before it is known to be what the signed index says.
Files land in a private staging directory; each is checked for size and sha256 as it
completes, the artifact's own manifest is checked against the index, and only then is the
staging directory renamed into the store. A file that fails verification empties the
staging directory, so nothing of a refused pull stays in the cache; a transport failure
keeps the partial files, and the next pull resumes them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from vllm_tvm.artifact_registry.http_download import ProgressBar
from vllm_tvm.artifact_registry.index import (
    INDEX_NAME,
    SIGNATURE_NAME,
    ArtifactEntry,
    FileEntry,
    RegistryError,
    RegistryIndex,
    parse_index,
)
from vllm_tvm.artifact_registry.machine import MachineTraits, why_not
from vllm_tvm.artifact_registry.signing import trusted_key_files, verify_index
from vllm_tvm.artifact_registry.sources import RegistrySource
from vllm_tvm.artifact_registry.store import (
    ARTIFACT_DIR,
    CHECKPOINT_DIR,
    PulledModel,
    model_dir,
    partial_dir,
    place,
    placed_name,
    pulled_models,
    single_file_checkpoint,
)
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import ArtifactError, read_manifest, sha256_of_file

MAX_PARALLEL_DOWNLOADS = 4
PARTIAL_SUFFIX = ".partial"

ProgressFactory = Callable[[str, int, int], ProgressBar]
"""(file name, size, position) -> a progress bar for that file."""


def tqdm_progress(enabled: bool) -> ProgressFactory:
    """Byte-counting tqdm bars on stderr, one line per file (or none)."""

    def make(name: str, size: int, position: int) -> ProgressBar:
        return tqdm(
            total=size,
            desc=name[:32],
            unit="B",
            unit_scale=True,
            position=position,
            leave=False,
            disable=not enabled,
        )

    return make


@dataclass(frozen=True)
class TrustPolicy:
    """How an index's signature is judged."""

    trusted_keys: tuple[Path, ...] = ()
    allow_unsigned: bool = False


@dataclass(frozen=True)
class SignedIndex:
    """An index whose signature was judged, and the source it came from."""

    index: RegistryIndex
    trust: str
    """Who signed it, or why it was accepted unsigned."""
    source: RegistrySource


def read_index(source: RegistrySource, policy: TrustPolicy) -> SignedIndex:
    """The registry's index, accepted only if its signature verifies (or unsigned is
    allowed)."""
    data = source.read_small(INDEX_NAME)
    if data is None:
        raise RegistryError(f"registry {source.description} has no {INDEX_NAME}")
    signature = source.read_small(SIGNATURE_NAME)
    keys = trusted_key_files(policy.trusted_keys)
    trust = verify_index(data, signature, keys, policy.allow_unsigned)
    return SignedIndex(parse_index(data), trust, source)


INDEXED_OPTIONS = ("target", "dtype", "weight_format")
"""The compile options an index entry records (and `why_not` matches to the machine)."""

RUN_TIME_OPTIONS = ("max_model_len",)
"""Compile options a prebuilt artifact serves at any value: the context sizes the engine,
and changes the build only past a longrope model's original context, which the index does
not record."""


def fitting_entries(
    entries: list[ArtifactEntry], machine: MachineTraits, options: CompileOptions
) -> tuple[list[ArtifactEntry], list[str]]:
    """The entries that run here built as `options` ask, and one line per entry that does
    not, saying why. Entries are built with every option the index does not record at its
    default, so options that differ from theirs (`CompileOptions.key_fields`, the fields
    every artifact key is made of) fit no entry."""
    unindexed = {
        name: value
        for name, value in options.key_fields().items()
        if name not in (*INDEXED_OPTIONS, *RUN_TIME_OPTIONS)
    }
    fits, reasons = [], []
    for entry in entries:
        reason = why_not(entry, machine, options.dtype, options.weight_format)
        if reason is None and unindexed:
            asked = ", ".join(f"{name} {value}" for name, value in unindexed.items())
            reason = f"built with the default compile options, asked for {asked}"
        if reason is None:
            fits.append(entry)
        else:
            reasons.append(f"{entry.describe()}: {reason}")
    return fits, reasons


def choose_entry(
    signed: SignedIndex, model_id: str, machine: MachineTraits, options: CompileOptions
) -> ArtifactEntry:
    """The (last published) entry of `model_id` that fits `options`; otherwise an error
    listing every entry and why it does not fit."""
    fits, reasons = fitting_entries(signed.index.entries_of(model_id), machine, options)
    if not fits:
        raise RegistryError(
            f"no prebuilt artifact of {model_id!r} fits this machine; the registry has:\n  "
            + "\n  ".join(reasons)
        )
    return fits[-1]


def pulled_fit(
    model_id: str, machine: MachineTraits, options: CompileOptions
) -> tuple[PulledModel | None, list[str]]:
    """The newest pulled artifact of `model_id` that fits `options` (no network), and why
    each other pulled artifact does not."""
    pulled = [m for m in pulled_models(model_id) if m.artifact_dir is not None]
    fits, reasons = fitting_entries([m.entry for m in pulled], machine, options)
    return next((m for m in pulled if m.entry in fits), None), reasons


def pull_entry(
    signed: SignedIndex,
    model_id: str,
    entry: ArtifactEntry,
    progress: ProgressFactory,
    with_artifact: bool = True,
) -> PulledModel:
    """`entry` placed in the store (fetched and verified unless already there); with
    `with_artifact` False only its checkpoint, to compile locally."""
    name = placed_name(entry, with_artifact)
    placed = model_dir(model_id) / name
    staging = partial_dir(model_id, name)
    with _exclusive(staging.with_name(staging.name + ".lock")):
        if not placed.is_dir():
            _download_and_verify(signed, entry, staging, progress, with_artifact)
            origin = {"registry": signed.source.description, "trust": signed.trust}
            place(staging, model_id, entry, origin)
    return next(m for m in pulled_models(model_id) if m.path.name == name)


def _download_and_verify(
    signed: SignedIndex,
    entry: ArtifactEntry,
    staging: Path,
    progress: ProgressFactory,
    with_artifact: bool,
) -> None:
    files = _layout(entry, staging, with_artifact)
    try:
        _fetch_all(signed.source, files, progress)
        if with_artifact:
            _check_artifact_manifest(staging / ARTIFACT_DIR, entry)
    except RegistryError as err:
        if not isinstance(err, _TransportError):
            shutil.rmtree(staging, ignore_errors=True)
        raise


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """One pull of an entry at a time across processes (they share its staging files)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class _TransportError(RegistryError):
    """A download that did not finish (kept for resuming), as opposed to a refusal."""


def _layout(
    entry: ArtifactEntry, staging: Path, with_artifact: bool
) -> list[tuple[FileEntry, Path]]:
    """Each file of the entry and where it goes in the staging directory."""
    checkpoint = staging / CHECKPOINT_DIR
    if not single_file_checkpoint(entry):
        checkpoint = checkpoint / entry.checkpoint_name
    files = [(f, checkpoint / f.name) for f in entry.checkpoint_files]
    if with_artifact:
        files += [(f, staging / ARTIFACT_DIR / f.name) for f in entry.artifact_files]
    for _, path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
    return files


def _fetch_all(
    source: RegistrySource, files: list[tuple[FileEntry, Path]], progress: ProgressFactory
) -> None:
    """Download the files in parallel; the first failure is raised after all have stopped."""
    jobs = [(file, path, position) for position, (file, path) in enumerate(files)]
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_DOWNLOADS, len(jobs) or 1)) as pool:
        futures = [pool.submit(_fetch_one, source, *job, progress) for job in jobs]
        errors = [future.exception() for future in futures]
    refusals = [e for e in errors if e is not None and not isinstance(e, _TransportError)]
    failures = refusals or [e for e in errors if e is not None]
    if failures:
        raise failures[0]


def _fetch_one(
    source: RegistrySource, file: FileEntry, path: Path, position: int, progress: ProgressFactory
) -> None:
    if path.is_file() and verify_file(path, file, raise_error=False):
        return
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    bar = progress(file.name, file.size, position)
    try:
        source.fetch(file, partial, bar)
    except RegistryError as err:
        raise _TransportError(str(err)) from None
    finally:
        close = getattr(bar, "close", None)
        if close is not None:
            close()
    verify_file(partial, file)
    os.replace(partial, path)


def verify_file(path: Path, file: FileEntry, raise_error: bool = True) -> bool:
    """Whether `path` holds exactly `file`'s bytes (size, then sha256); a mismatch is
    refused by name (or reported False) and the file deleted."""
    size = path.stat().st_size
    problem = None
    if size != file.size:
        problem = f"has {size} bytes, the signed index says {file.size}"
    else:
        actual = sha256_of_file(path)
        if actual != file.sha256:
            problem = f"has sha256 {actual}, the signed index says {file.sha256}"
    if problem is None:
        return True
    path.unlink()
    if raise_error:
        raise RegistryError(f"downloaded file {file.name} {problem}; refused, nothing kept")
    return False


def _check_artifact_manifest(artifact_dir: Path, entry: ArtifactEntry) -> None:
    """The artifact's manifest must hash its files as the index does and describe the entry
    (reading it opens no library)."""
    try:
        manifest = read_manifest(artifact_dir, verify=True)
    except ArtifactError as err:
        raise RegistryError(f"pulled artifact refused: {err}") from None
    listed = {f.name: f.sha256 for f in entry.artifact_files if f.name != "manifest.json"}
    if manifest.files != listed:
        raise RegistryError(
            "pulled artifact refused: its manifest lists other files than the index"
        )
    if (manifest.config_hash, manifest.target, manifest.dtype) != (
        entry.config_hash,
        entry.target,
        entry.dtype,
    ):
        raise RegistryError("pulled artifact refused: its manifest describes another build")
