"""Checkpoints and artifacts the project cannot use exactly are refused, by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import ArtifactError, read_manifest
from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.compiler.build import cache_key_for, compile_cached, make_request
from vllm_tvm.runtime.model.runner import ModelRunner


def _edit_config(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def _compile_error(model_dir: Path, capsys) -> str:
    assert cli_main(["compile", str(model_dir)]) == 1
    return capsys.readouterr().err


def test_unknown_architecture_is_refused_naming_it(tiny_model_dir, tmp_path, capsys) -> None:
    model = _edit_config(tiny_model_dir("llama"), tmp_path / "m", architectures=["FooForCausalLM"])
    err = _compile_error(model, capsys)
    assert "unsupported architecture FooForCausalLM" in err
    assert "LlamaForCausalLM" in err


def test_missing_config_key_is_refused_naming_it(tiny_model_dir, tmp_path, capsys) -> None:
    model = _edit_config(tiny_model_dir("llama"), tmp_path / "m", hidden_size=None)
    assert "missing required key 'hidden_size'" in _compile_error(model, capsys)


def test_unsupported_rope_type_is_refused_naming_it(tiny_model_dir, tmp_path, capsys) -> None:
    model = _edit_config(
        tiny_model_dir("llama"),
        tmp_path / "m",
        rope_parameters={"rope_type": "llama4", "factor": 2.0, "rope_theta": 10000.0},
    )
    err = _compile_error(model, capsys)
    assert "unsupported rope_scaling type 'llama4'" in err
    assert "llama3" in err


def test_unsupported_dtype_is_refused_naming_it(tiny_model_dir, capsys) -> None:
    code = cli_main(["compile", str(tiny_model_dir("llama")), "--dtype", "int3"])
    assert code == 1
    assert "unsupported dtype 'int3'" in capsys.readouterr().err


def test_tampered_library_is_refused_before_loading(tiny_model_dir, tmp_path) -> None:
    model = tiny_model_dir("llama")
    artifact = tmp_path / "artifact"
    shutil.copytree(
        compile_cached(make_request(CompileOptions(model)), show_progress=False), artifact
    )
    with (artifact / "model.so").open("ab") as stream:
        stream.write(b"\0")
    with pytest.raises(ArtifactError, match="sha256"):
        ModelRunner(artifact, model, show_progress=False)


def test_checkpoint_that_does_not_fit_the_artifact_is_refused(tiny_model_dir) -> None:
    llama = tiny_model_dir("llama")
    artifact = compile_cached(
        make_request(CompileOptions(tiny_model_dir("qwen3_qknorm"))), show_progress=False
    )
    with pytest.raises(ValueError, match=r"expects|has no tensor"):
        ModelRunner(artifact, llama, show_progress=False)


def test_manifest_records_what_the_runtime_needs(tiny_model_dir) -> None:
    model = tiny_model_dir("qwen2_tied_bias")
    request = make_request(CompileOptions(model))
    manifest = read_manifest(compile_cached(request, show_progress=False))
    assert manifest.architecture == "Qwen2ForCausalLM"
    assert manifest.dtype == "float32"
    assert manifest.target_kind == "llvm"
    assert {"embed", "prefill", "decode", "decode_single", "create_kv_cache", "_metadata"} <= set(
        manifest.functions
    )
    assert set(manifest.files) == {"model.so"}
    fused = next(p for p in manifest.params if p.name.endswith("layers.0.self_attn.qkv_proj.bias"))
    assert fused.sources == [
        "model.layers.0.self_attn.q_proj.bias",
        "model.layers.0.self_attn.k_proj.bias",
        "model.layers.0.self_attn.v_proj.bias",
    ]
    assert len(cache_key_for(request)) == 24
