"""FlashInfer's compiled attention objects, kept from one compile to the next.

Why: TVM 0.27's hook (`tvm.relax.backend.cuda.flashinfer`) regenerates FlashInfer's sources
and rewrites their exported names on every call, so ninja finds every source newer than its
object and runs nvcc over all of them again: tens of minutes on a 2-core machine for each
compile of a FlashInfer artifact, whatever the model. The objects depend only on the hook's
arguments (dtypes, head dims), the FlashInfer release, the architecture list and the CUDA
toolkit, so they are kept under `<cache>/flashinfer_objects/<digest of those>/` and a later
compile links the kept copies without building. A kept entry is written whole or not at all
(a temporary directory renamed into place), so concurrent compiles are safe.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HOOKS = (
    "gen_flashinfer_prefill_module",
    "gen_flashinfer_decode_module",
    "gen_flashinfer_mla_module",
)
"""The hook's builders that TVM's FlashInfer KV cache calls (always with keyword arguments)."""
LISTING = "objects.json"


def toolkit_identity(toolkit: Path) -> str:
    """What identifies the CUDA compiler that builds the objects: `nvcc --version`."""
    nvcc = toolkit / "bin" / "nvcc"
    result = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


def flashinfer_release() -> str:
    """The installed FlashInfer release (compiler/attention.py admits one)."""
    return importlib.metadata.version("flashinfer-python")


def entry_digest(hook: str, arguments: dict[str, Any], toolkit: str) -> str:
    """The kept entry's name: a digest of everything the objects are built from."""
    identity = {
        "hook": hook,
        "arguments": {name: repr(value) for name, value in sorted(arguments.items())},
        "flashinfer": flashinfer_release(),
        "arch": os.environ.get("FLASHINFER_CUDA_ARCH_LIST", ""),
        "toolkit": toolkit,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def keep_objects(entry: Path, objects: list[Path]) -> None:
    """Copy `objects` into `entry` with their listing, atomically; an entry another compile
    wrote meanwhile is left as it is."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".staging-"))
    try:
        names = []
        for index, source in enumerate(objects):
            name = f"{index:02d}_{source.name}"
            shutil.copy2(source, staging / name)
            names.append(name)
        (staging / LISTING).write_text(json.dumps(names))
        os.rename(staging, entry)
    except OSError:
        if not (entry / LISTING).is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def kept_objects(entry: Path) -> list[Path] | None:
    """The kept objects of `entry` in link order, or None when it was never written."""
    listing = entry / LISTING
    if not listing.is_file():
        return None
    return [entry / name for name in json.loads(listing.read_text())]


@contextlib.contextmanager
def flashinfer_objects_kept(cache_dir: Path, toolkit: Path) -> Iterator[None]:
    """While active, each FlashInfer builder the hook offers links kept objects when an entry
    for its arguments exists, and otherwise builds as usual and keeps what it built."""
    from tvm.relax.backend.cuda import flashinfer as hook

    load = hook._load_flashinfer_modules
    originals = {name: getattr(hook, name) for name in HOOKS if hasattr(hook, name)}
    compiler = functools.cache(lambda: toolkit_identity(toolkit))

    def keeping(name: str, build: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
        def builder(**arguments: Any) -> list[Any]:
            if not arguments.get("return_static_libs"):
                return build(**arguments)
            entry = cache_dir / entry_digest(name, arguments, compiler())
            objects = kept_objects(entry)
            if objects is not None:
                return load(objects)
            built: list[Path] = []

            def capture(object_files: list[Path]) -> list[Any]:
                built.extend(Path(path) for path in object_files)
                return load(object_files)

            hook._load_flashinfer_modules = capture
            try:
                modules = build(**arguments)
            finally:
                hook._load_flashinfer_modules = load
            keep_objects(entry, built)
            return modules

        return builder

    for name, build in originals.items():
        setattr(hook, name, keeping(name, build))
    try:
        yield
    finally:
        for name, build in originals.items():
            setattr(hook, name, build)
