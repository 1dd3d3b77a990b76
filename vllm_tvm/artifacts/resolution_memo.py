"""Which cached artifact a model's compile options resolved to, remembered so that a cached
start needs neither the compiler nor TVM's compiler library.

Why it exists: an artifact's cache key digests the model config, the target (the CPU's name
on CPU), TVM's version and the source of the code that builds the library (cache.py,
compiler/source_digest.py). Computing it imports the compiler (`tvm.relax`, LLVM inside
libtvm_compiler.so) and parses that source: over a second of every start, and most of the
process's memory, spent before any work when the artifact is already there. The memo keeps,
per resolution, the artifact it found, under the options' `artifact_key`
(compile_options.py) with the model named by its files and everything the cache key reads
that can change without the options changing: the model files' sizes and mtimes, every vllm_tvm
source file's size and mtime, the installed TVM version, this CPU and the environment
switches the compiler reads. Any change is a miss, and the entry point computes the real key
(the same artifact again when nothing that matters changed), then remembers it anew.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from importlib import metadata
from pathlib import Path

import vllm_tvm
from vllm_tvm.artifacts.cache import cache_root
from vllm_tvm.artifacts.compile_options import CompileOptions, artifact_key

COMPILER_ENV_SWITCHES = ("VLLM_TVM_CUDA_GRAPH",)
"""Environment variables that change what a compile request resolves to."""


def remembered_artifact(options: CompileOptions) -> Path | None:
    """The artifact `options` resolved to last time, when nothing it depends on changed and
    the artifact is still complete; else None."""
    try:
        entry = json.loads(_entry_path(options).read_text(encoding="utf-8"))
        artifact = Path(entry["artifact"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return artifact if (artifact / "manifest.json").is_file() else None


def remember_artifact(options: CompileOptions, artifact: Path) -> None:
    """Remember that `options` resolved to `artifact` (best effort: a cache directory that
    cannot be written only costs the next start the full resolution)."""
    entry = _entry_path(options)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = entry.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"artifact": str(artifact)}), encoding="utf-8")
        partial.replace(entry)
    except OSError:
        pass


def _entry_path(options: CompileOptions) -> Path:
    model = Path(options.model)
    identity = {"path": str(model.resolve()), "files": _stats(_model_files(model))}
    depends_on = {
        "sources": _source_signature(),
        "tvm": _installed_version("apache-tvm"),
        "cpu": _cpu_identity(),
        "env": {name: os.environ.get(name) for name in COMPILER_ENV_SWITCHES},
    }
    return cache_root() / "resolved" / f"{artifact_key(identity, options, depends_on)}.json"


def _model_files(model: Path) -> list[Path]:
    if model.is_dir():
        return sorted(path for path in model.iterdir() if path.is_file())
    return [model]


def _stats(paths: list[Path]) -> list[tuple[str, int, int]]:
    found = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        found.append((path.name, stat.st_size, stat.st_mtime_ns))
    return found


def _source_signature() -> str:
    """Size and mtime of every Python file of the package, digested."""
    root = Path(vllm_tvm.__file__).parent
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".py"):
                stat = os.stat(os.path.join(dirpath, name))
                digest.update(f"{dirpath}/{name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()


def _installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _cpu_identity() -> str:
    """The machine and, on Linux, the first processor's model and feature flags (the CPU
    target is compiled for the processor it was built on)."""
    identity = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "flags")):
                    identity += "|" + line.strip()
                elif not line.strip():
                    break
    except OSError:
        pass
    return identity
