"""A cached start from a GGUF file whose artifact holds no bfloat16 or float8 parameter keeps
TVM's FFI from importing ml_dtypes; every other start keeps it."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from vllm_tvm.cli.preflight import IMPORT_ML_DTYPES_ENV, skip_ml_dtypes_import
from vllm_tvm.runtime.engine.args import EngineArgs

_SENTINEL = object()


def _engine(tmp_path: Path, dtypes: list[str], model: str = "model.gguf") -> EngineArgs:
    artifact = tmp_path / "artifact"
    artifact.mkdir(exist_ok=True)
    params = [{"name": f"p{i}", "dtype": dtype} for i, dtype in enumerate(dtypes)]
    (artifact / "manifest.json").write_text(json.dumps({"params": params}), encoding="utf-8")
    return EngineArgs(model=str(tmp_path / model), artifact=str(artifact))


def _skipped(engine: EngineArgs, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether `skip_ml_dtypes_import` blocks the import in a process without TVM yet."""
    monkeypatch.delitem(sys.modules, "tvm", raising=False)
    monkeypatch.delitem(sys.modules, "ml_dtypes", raising=False)
    monkeypatch.delenv(IMPORT_ML_DTYPES_ENV, raising=False)
    skip_ml_dtypes_import(engine)
    blocked = sys.modules.get("ml_dtypes", _SENTINEL) is None
    monkeypatch.delitem(sys.modules, "ml_dtypes", raising=False)
    return blocked


def test_gguf_with_plain_float_and_integer_parameters_skips_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _skipped(_engine(tmp_path, ["float32", "uint32", "float16"]), monkeypatch)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_a_parameter_numpy_cannot_hold_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    assert not _skipped(_engine(tmp_path, ["float32", dtype]), monkeypatch)


def test_other_checkpoints_dummy_weights_and_uncompiled_starts_keep_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(tmp_path, ["float32"])
    assert not _skipped(_engine(tmp_path, ["float32"], model="model_dir"), monkeypatch)
    assert not _skipped(replace(engine, load_format="dummy"), monkeypatch)
    assert not _skipped(replace(engine, artifact=None), monkeypatch)
    monkeypatch.setenv(IMPORT_ML_DTYPES_ENV, "1")
    skip_ml_dtypes_import(engine)
    assert sys.modules.get("ml_dtypes", _SENTINEL) is not None
