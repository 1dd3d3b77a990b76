"""One set of compile options from every front end to the artifact: `LLM`, `generate`, `serve`
and `bench` each resolve their engine once, through the one resolve step, with the kernel
choices the user gave; bad choices are refused by name before anything loads; the compile
cache, the resolution memo and the registry key the options through one function."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from vllm_tvm.artifact_registry.index import ArtifactEntry
from vllm_tvm.artifact_registry.machine import MachineTraits
from vllm_tvm.artifact_registry.pull import fitting_entries
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.resolution_memo import remember_artifact, remembered_artifact
from vllm_tvm.cli import preflight
from vllm_tvm.cli.main import main
from vllm_tvm.runtime.engine.args import EngineArgs

KERNELS = ["--device", "cuda", "--attention", "flashinfer", "--gemm", "cublaslt"]
"""Kernel choices other than the defaults (both need a CUDA target, which is not checked for
a GPU until a command runs)."""


class Resolved(Exception):
    """Raised by the fake resolve step: the front end got as far as resolving."""


@pytest.fixture
def resolve_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[EngineArgs, Any]]:
    """Every call of the resolve step, by any front end, with its `before_load` hook; the
    first one stops the front end (nothing is compiled or loaded)."""
    from vllm_tvm.benchmarking import engine_setup
    from vllm_tvm.cli import generate_cmd, serve_cmd
    from vllm_tvm.entrypoints import llm

    calls: list[tuple[EngineArgs, Any]] = []

    def fake_resolve(args: EngineArgs, registry=None, before_load=None) -> EngineArgs:
        calls.append((args, before_load))
        raise Resolved

    for module in (llm, generate_cmd, serve_cmd, engine_setup):
        monkeypatch.setattr(module, "resolve_engine", fake_resolve)
    for module in (generate_cmd, serve_cmd):
        monkeypatch.setattr(module, "check_device", lambda device: None)
    return calls


@pytest.mark.parametrize(
    "command",
    [
        ["generate", "--prompt", "hello"],
        ["serve", "--port", "0"],
        ["bench", "--concurrency", "1"],
    ],
    ids=lambda command: command[0],
)
def test_each_command_resolves_once_with_the_kernels_it_was_given(
    command: list[str], resolve_calls, tmp_path: Path
) -> None:
    with pytest.raises(Resolved):
        main([*command, "--model", str(tmp_path), *KERNELS])
    [(args, before_load)] = resolve_calls
    options = args.compile_options
    assert (options.target, options.attention, options.gemm) == ("cuda", "flashinfer", "cublaslt")
    assert before_load is preflight.prepare_command_start


def test_llm_resolves_once_with_the_kernels_it_was_given(resolve_calls, tmp_path: Path) -> None:
    from vllm_tvm.entrypoints.llm import LLM

    with pytest.raises(Resolved):
        LLM(tmp_path, device="cuda", attention="flashinfer", gemm="cublaslt")
    [(args, _)] = resolve_calls
    assert (args.compile_options.attention, args.compile_options.gemm) == ("flashinfer", "cublaslt")


def test_generate_builds_its_llm_from_the_resolved_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The options the command resolved are the ones its LLM runs on: no second resolve."""
    from vllm_tvm.cli import generate_cmd
    from vllm_tvm.entrypoints import llm

    resolved = EngineArgs(model=str(tmp_path), artifact=str(tmp_path / "artifact"))
    started: list[EngineArgs] = []
    monkeypatch.setattr(generate_cmd, "resolve_engine", lambda args, *_, **__: resolved)
    monkeypatch.setattr(llm, "resolve_engine", lambda *_, **__: pytest.fail("resolved twice"))

    def start(self: llm.LLM, args: EngineArgs) -> None:
        started.append(args)
        raise Resolved

    monkeypatch.setattr(llm.LLM, "_start", start)
    with pytest.raises(Resolved):
        main(["generate", "--model", str(tmp_path), "--prompt", "hello"])
    assert started == [resolved]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attention": "flash"}, "unsupported attention 'flash'; supported: tir, flashinfer"),
        ({"gemm": "cutlass"}, "unsupported gemm 'cutlass'; supported: auto, cublaslt, tir"),
        ({"attention": "flashinfer"}, "attention 'flashinfer' needs a cuda target"),
        ({"gemm": "cublaslt", "device": "cuda", "dtype": "float32"}, "got target 'cuda' and dtype"),
    ],
)
def test_llm_refuses_a_kernel_choice_by_name_before_anything_loads(
    options: dict[str, str], message: str, resolve_calls
) -> None:
    from vllm_tvm.entrypoints.llm import LLM

    with pytest.raises(ValueError, match=message):
        LLM("model", **options)
    assert resolve_calls == []


@pytest.mark.parametrize(
    "command",
    [["generate", "--model", "m"], ["serve", "m"], ["bench", "--model", "m"], ["compile", "m"]],
    ids=lambda command: command[0],
)
def test_every_command_refuses_an_unknown_attention_by_name(command: list[str], capsys) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--attention", "flash"])
    assert "invalid choice: 'flash'" in capsys.readouterr().err


def test_the_cache_the_memo_and_the_registry_key_the_options_alike(
    tiny_model_dir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All three read the options through `CompileOptions.key_fields`, so an option the
    model's plain build lacks (a kernel choice) misses in each of them."""
    from vllm_tvm.compiler.build import cache_key_for, make_request

    readers: list[str] = []
    key_fields = CompileOptions.key_fields

    def spy(self: CompileOptions) -> dict[str, object]:
        readers.append(Path(str(self.model)).name)
        return key_fields(self)

    monkeypatch.setattr(CompileOptions, "key_fields", spy)
    model = tiny_model_dir("llama")
    plain = CompileOptions(model, "cuda", "bfloat16", gemm="tir")
    chosen = replace(plain, gemm="cublaslt")
    assert cache_key_for(make_request(plain)) != cache_key_for(make_request(chosen))
    assert readers.count(model.name) == 2
    readers.clear()
    monkeypatch.setenv("VLLM_TVM_CACHE_DIR", str(tmp_path / "cache"))
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "manifest.json").write_text("{}")
    remember_artifact(plain, artifact)
    assert remembered_artifact(plain) == artifact and remembered_artifact(chosen) is None
    assert readers.count(model.name) == 3
    readers.clear()
    entry = _registry_entry()
    machine = MachineTraits("cuda", {"arch": "sm_90"}, "0.27.0")
    fits, _ = fitting_entries([entry], machine, CompileOptions("m", "cuda"))
    assert fits == [entry]
    fits, [reason] = fitting_entries([entry], machine, CompileOptions("m", "cuda", gemm="tir"))
    assert not fits and "asked for gemm tir" in reason
    assert readers == ["m", "m"]


def test_a_registry_entry_serves_any_context_but_not_another_split() -> None:
    entry = _registry_entry()
    machine = MachineTraits("cuda", {"arch": "sm_90"}, "0.27.0")
    fits, _ = fitting_entries([entry], machine, CompileOptions("m", "cuda", max_model_len=256))
    assert fits == [entry]
    split = CompileOptions("m", "cuda", tensor_parallel_size=2)
    assert "asked for tensor_parallel_size 2" in fitting_entries([entry], machine, split)[1][0]


def _registry_entry() -> ArtifactEntry:
    return ArtifactEntry(
        target="cuda",
        target_kind="cuda",
        features={"arch": "sm_90a"},
        dtype="bfloat16",
        weight_format="native",
        tvm_version="0.27.0",
        config_hash="abc",
        architecture="LlamaForCausalLM",
        artifact_files=[],
        checkpoint_name="m",
        checkpoint_files=[],
    )
