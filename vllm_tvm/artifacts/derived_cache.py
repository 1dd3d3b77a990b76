"""Files derived from a checkpoint file, kept so that the next start reads them instead of
deriving them again.

Why it exists: a cached start still spent most of a second turning the GGUF checkpoint into
what the runtime uses: the tokenizer from the vocabulary in its metadata, and the quantized
weights repacked into the planes the kernels read. Both depend only on the file's bytes and
on the code that derives them, so an entry is keyed by the file's resolved path, size and
mtime and by that code's version (a digest of its source files and library versions): a
changed checkpoint or changed deriving code is a different key and derives anew.

An entry is a directory holding the derived files and `index.json`, which lists each file's
size and CRC-32. It is written under a temporary name and renamed into place, so a reader
never sees half of one; a reader that finds the index missing or unreadable, a file missing,
or a size or checksum that differs treats the entry as absent, and the caller derives and
stores it again. Storing is best effort: a cache directory that cannot be written costs
the next start the derivation, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from vllm_tvm.artifacts.cache import cache_root

INDEX_NAME = "index.json"


def code_version(sources: Iterable[str | Path], *extra: str) -> str:
    """A digest of the deriving code: the bytes of its source files and `extra` strings
    (library versions)."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(Path(path).read_bytes())
    for text in extra:
        digest.update(text.encode())
    return digest.hexdigest()[:16]


def entry_dir(kind: str, checkpoint_file: Path, version: str) -> Path:
    """Where the `kind` files derived from `checkpoint_file` by code `version` live."""
    resolved = Path(checkpoint_file).resolve()
    stat = resolved.stat()
    key = json.dumps([kind, str(resolved), stat.st_size, stat.st_mtime_ns, version])
    return cache_root() / "derived" / kind / hashlib.sha256(key.encode()).hexdigest()[:32]


def read_entry(kind: str, checkpoint_file: Path, version: str) -> Path | None:
    """The entry's directory when it is complete and every file matches its index; else
    None (absent, stale or corrupt)."""
    directory = entry_dir(kind, checkpoint_file, version)
    try:
        index = json.loads((directory / INDEX_NAME).read_text(encoding="utf-8"))
        files = index["files"]
        for name, (size, crc) in files.items():
            if _size_and_crc(directory / name) != (size, crc):
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return directory


def write_entry(
    kind: str, checkpoint_file: Path, version: str, write: Callable[[Path], None]
) -> Path | None:
    """Store an entry: `write(directory)` fills a fresh directory, which is indexed and
    renamed into place. Returns the stored directory, or None when it could not be stored;
    an error raised by `write` itself propagates, leaving nothing behind."""
    directory = entry_dir(kind, checkpoint_file, version)
    partial = directory.with_name(f"{directory.name}.{os.getpid()}.tmp")
    try:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        write(partial)
        files = {path.name: list(_size_and_crc(path)) for path in sorted(partial.iterdir())}
        (partial / INDEX_NAME).write_text(json.dumps({"files": files}), encoding="utf-8")
        shutil.rmtree(directory, ignore_errors=True)
        partial.rename(directory)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        return None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return directory


def _size_and_crc(path: Path) -> tuple[int, int]:
    """Size and CRC-32 of `path`, read through a memory map (the pages stay cached for the
    caller that maps the file next)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return 0, 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return size, zlib.crc32(mapped)
