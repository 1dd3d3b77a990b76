"""Which source files make an artifact, read from the imports, and their digest.

Why this exists: the compile cache reuses an artifact whose key matches, so the key must
change whenever any code that shapes a library changes, and only then. That code is every
subpackage the compiler reaches through its imports (model definitions, schedules,
checkpoint formats, the artifact manifest, and kernels, whose C++ source is built into the
extension an artifact carries), with all their source files, Python and native. The set is
derived from the import statements rather than listed, so a new dependency of the compiler
is covered the day it is imported; the runtime and the server, which the compiler never
imports, do not invalidate compiled artifacts.
"""

from __future__ import annotations

import ast
import hashlib
import threading
from pathlib import Path

import vllm_tvm

PACKAGE_ROOT = Path(vllm_tvm.__file__).parent
COMPILER_SUBPACKAGE = "compiler"
SOURCE_SUFFIXES = (".py", ".c", ".cc", ".cpp", ".cu", ".h")
"""Python, and the C/C++/CUDA sources of the native code built into an artifact."""

_PARSE_LOCK = threading.Lock()
"""CPython 3.11's `ast.parse` is not safe from two threads at once (it raises "AST constructor
recursion depth mismatch"); two `generate` callers sharing a process key their compiles together."""


def module_name(path: Path, package_root: Path = PACKAGE_ROOT) -> str:
    """`<root>/runtime/engine/scheduler.py` -> `vllm_tvm.runtime.engine.scheduler`."""
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package_root: Path = PACKAGE_ROOT) -> set[str]:
    """Every vllm_tvm module `path` imports, at any depth of its syntax tree (lazy imports
    inside functions included, relative imports resolved)."""
    module = module_name(path, package_root)
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    with _PARSE_LOCK:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] == package_root.name}


def _source_unit(module: str, package_root: Path) -> Path | None:
    """The subpackage directory (or top-level module file) that holds `module`."""
    parts = module.split(".")
    if len(parts) == 1:
        return package_root / "__init__.py"
    subpackage = package_root / parts[1]
    if subpackage.is_dir():
        return subpackage
    top_level = package_root / f"{parts[1]}.py"
    return top_level if top_level.is_file() else None


def _source_files(unit: Path) -> list[Path]:
    if unit.is_file():
        return [unit]
    return sorted(
        path
        for path in unit.rglob("*")
        if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts
    )


def compiler_source_units(package_root: Path = PACKAGE_ROOT) -> list[Path]:
    """The compiler's subpackage and every subpackage (or top-level module) it reaches
    through imports, directly or through another subpackage; sorted.

    The imports of a top-level module are not followed: the package's `__init__` (whose
    `__version__` the manifest records) lazily imports the whole API for its users, none of
    which the compiler runs.
    """
    reached = {package_root / COMPILER_SUBPACKAGE}
    pending = list(reached)
    while pending:
        unit = pending.pop()
        if unit.is_file():
            continue
        for path in _source_files(unit):
            if path.suffix != ".py":
                continue
            for module in imported_modules(path, package_root):
                target = _source_unit(module, package_root)
                if target is not None and target not in reached:
                    reached.add(target)
                    pending.append(target)
    return sorted(reached)


def compiler_source_digest(package_root: Path = PACKAGE_ROOT) -> str:
    """sha256 over the path and content of every source file of `compiler_source_units`."""
    digest = hashlib.sha256()
    for unit in compiler_source_units(package_root):
        for path in _source_files(unit):
            digest.update(path.relative_to(package_root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
