"""A cached start: a resolution remembered unchanged gives its artifact without the compiler,
and `generate` then runs on TVM's runtime library alone, with the same tokens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.resolution_memo import remember_artifact, remembered_artifact
from vllm_tvm.cli import preflight
from vllm_tvm.entrypoints.resolve import resolve_artifact, resolve_engine
from vllm_tvm.runtime.sampling.params import SamplingParams


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A model file and a complete artifact directory in a cache of their own."""
    monkeypatch.setenv("VLLM_TVM_CACHE_DIR", str(tmp_path / "cache"))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights")
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "manifest.json").write_text("{}")
    return model, artifact


def test_a_remembered_resolution_is_found_while_nothing_changed(built) -> None:
    model, artifact = built
    assert remembered_artifact(CompileOptions(model)) is None
    remember_artifact(CompileOptions(model), artifact)
    assert remembered_artifact(CompileOptions(model)) == artifact
    assert remembered_artifact(CompileOptions(model, dtype="float32")) is None


def test_a_changed_model_file_or_compiler_switch_misses(built, monkeypatch) -> None:
    model, artifact = built
    remember_artifact(CompileOptions(model), artifact)
    monkeypatch.setenv("VLLM_TVM_CUDA_GRAPH", "0")
    assert remembered_artifact(CompileOptions(model)) is None
    monkeypatch.delenv("VLLM_TVM_CUDA_GRAPH")
    model.write_bytes(b"other weights")
    assert remembered_artifact(CompileOptions(model)) is None


def test_an_incomplete_artifact_is_not_given(built) -> None:
    model, artifact = built
    remember_artifact(CompileOptions(model), artifact)
    (artifact / "manifest.json").unlink()
    assert remembered_artifact(CompileOptions(model)) is None


def test_a_built_artifact_selects_the_runtime_library_before_tvm_loads(
    built, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_tvm.runtime.engine.args import EngineArgs

    model, artifact = built
    monkeypatch.setenv(preflight.RUNTIME_ONLY_ENV, "0")  # so that teardown restores it
    monkeypatch.delenv(preflight.RUNTIME_ONLY_ENV)
    monkeypatch.delitem(sys.modules, "tvm")
    engine = EngineArgs(model=str(model))
    preflight.select_runtime_library(engine)  # still to compile
    assert preflight.RUNTIME_ONLY_ENV not in os.environ
    remember_artifact(engine.compile_options, artifact)
    resolved = resolve_engine(engine, before_load=preflight.select_runtime_library)
    assert resolved.artifact == artifact
    assert os.environ[preflight.RUNTIME_ONLY_ENV] == "1"


def test_generate_from_a_cached_artifact_loads_no_compiler(tiny_model_dir, make_llm) -> None:
    model = tiny_model_dir("llama")
    resolve_artifact(CompileOptions(model), show_progress=False)  # built and remembered
    expected = make_llm().generate("hello world", SamplingParams(temperature=0.0, max_tokens=6))
    script = (
        "import sys; from vllm_tvm.cli.main import main; "
        f"code = main(['generate', '--model', {str(model)!r}, '--prompt', 'hello world', "
        "'--max-tokens', '6', '--json']); import tvm; "
        "print(json.dumps([tvm.base._RUNTIME_ONLY, 'vllm_tvm.compiler.build' in sys.modules]))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop(preflight.RUNTIME_ONLY_ENV, None)
    result = subprocess.run(
        [sys.executable, "-c", "import json; " + script],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    generated, loaded = result.stdout.strip().splitlines()[-2:]
    assert json.loads(loaded) == [True, False]
    assert json.loads(generated)["token_ids"] == expected[0].outputs[0].token_ids
