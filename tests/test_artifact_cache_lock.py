"""Callers sharing one artifact cache compile a missing entry once: the first compiles under the
entry's lock, the others wait and reuse its artifact (two `generate` runs started together)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from vllm_tvm.artifacts.cache import entry_lock
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.compiler import build


def test_concurrent_callers_compile_a_missing_entry_once(
    tiny_model_dir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_TVM_CACHE_DIR", str(tmp_path / "cache"))
    request = build.make_request(CompileOptions(tiny_model_dir("llama")))
    compiles: list[Path] = []

    def slow_compile(request: build.CompileRequest, output_dir: Path, show_progress: bool) -> Path:
        compiles.append(output_dir)
        time.sleep(0.5)  # long enough for the other caller to find the entry missing
        output_dir.mkdir(parents=True)
        (output_dir / "manifest.json").write_text("{}")
        return output_dir

    monkeypatch.setattr(build, "compile_model", slow_compile)
    start = threading.Barrier(2)
    results: list[Path] = []

    def caller() -> None:
        start.wait()
        results.append(build.compile_cached(request, show_progress=False))

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(compiles) == 1
    assert results == [compiles[0], compiles[0]]


def test_the_lock_excludes_a_second_holder_until_released(tmp_path: Path) -> None:
    entry = tmp_path / "artifacts" / "key"
    order: list[str] = []
    with entry_lock(entry):
        waiter = threading.Thread(target=lambda: _take(entry, order))
        waiter.start()
        time.sleep(0.3)
        order.append("first released")
    waiter.join()
    assert order == ["first released", "second held"]


def _take(entry: Path, order: list[str]) -> None:
    with entry_lock(entry):
        order.append("second held")
