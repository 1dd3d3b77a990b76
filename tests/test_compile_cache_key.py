"""The compile cache key covers every source file that shapes an artifact, and nothing else:
the compiler's own code and all it reaches through imports (model definitions, schedules,
checkpoint formats, the manifest, the kernels' C++ source), not the runtime or the server.

Edits are made in a copy of the package, so the real sources are never touched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.compiler import build
from vllm_tvm.compiler.build import cache_key_for, make_request
from vllm_tvm.compiler.source_digest import (
    PACKAGE_ROOT,
    compiler_source_digest,
    compiler_source_units,
)


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the vllm_tvm package's sources (same name, outside the import path)."""
    copy = tmp_path / PACKAGE_ROOT.name
    shutil.copytree(PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_the_key_covers_what_the_compiler_reaches_through_its_imports() -> None:
    units = {unit.relative_to(PACKAGE_ROOT).as_posix() for unit in compiler_source_units()}
    assert units == {
        "__init__.py",
        "artifacts",
        "checkpoints",
        "compiler",
        "extensions",
        "model_defs",
        "schedules",
    }


@pytest.mark.parametrize(
    ("source", "edit"),
    [
        ("extensions/cublaslt_gemm.cc", "\n// a changed kernel\n"),
        ("checkpoints/weight_formats.py", "\n# a changed storage format\n"),
        ("checkpoints/gguf_config.py", "\n# a changed GGUF reading\n"),
        ("schedules/sampling_kernels.py", "\n# a changed schedule\n"),
        ("model_defs/llama.py", "\n# a changed model definition\n"),
        ("compiler/pipeline.py", "\n# a changed pipeline\n"),
        ("__init__.py", "\n# a new version\n"),
    ],
)
def test_editing_a_build_source_changes_the_key(package_copy: Path, source: str, edit: str) -> None:
    before = compiler_source_digest(package_copy)
    _append(package_copy / source, edit)
    assert compiler_source_digest(package_copy) != before


@pytest.mark.parametrize(
    "source", ["runtime/engine/scheduler.py", "runtime/model/runner.py", "server/app.py"]
)
def test_editing_serving_code_keeps_the_key(package_copy: Path, source: str) -> None:
    before = compiler_source_digest(package_copy)
    _append(package_copy / source, "\n# a serving change\n")
    assert compiler_source_digest(package_copy) == before


@pytest.mark.parametrize(
    "import_line", ["from vllm_tvm.server import app", "from ..server import app"]
)
def test_a_new_import_brings_its_subpackage_into_the_key(
    package_copy: Path, import_line: str
) -> None:
    _append(package_copy / "compiler" / "pipeline.py", f"\n{import_line}\n")
    assert package_copy / "server" in compiler_source_units(package_copy)
    before = compiler_source_digest(package_copy)
    _append(package_copy / "server" / "app.py", "\n# now part of the build\n")
    assert compiler_source_digest(package_copy) != before


def test_the_request_key_follows_the_source_digest(
    tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = make_request(CompileOptions(tiny_model_dir("llama")))
    before = cache_key_for(request)
    monkeypatch.setattr(build, "compiler_source_digest", lambda: "edited sources")
    assert cache_key_for(request) != before
