"""A registry model id end to end: `keygen` and `publish` a compiled tiny model, then
`LLM(model=ID)` pulls it from a loopback HTTP registry and generates the same greedy ids as
the local compile, opening nothing of the pulled files before every one is verified; the
`pull`, `models` and `--offline` commands; and the local compile when no artifact fits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from registry_fixtures import make_fake_registry
from registry_server import RegistryServer

from vllm_tvm.artifact_registry import pull as pull_module
from vllm_tvm.artifact_registry.store import model_dir, pulled_models
from vllm_tvm.checkpoints.default_model import DEFAULT_MODEL_NAME, DefaultModelMissingError
from vllm_tvm.checkpoints.default_model import default_model_path as installed_default_model
from vllm_tvm.cli.main import main
from vllm_tvm.runtime.sampling.params import SamplingParams

PROMPT = [1, 5, 9, 2, 7]
GREEDY = SamplingParams(max_tokens=8, temperature=0.0)

EVENTS: list[tuple[str, str]] = []
"""What the audit hook saw while a test records: ("open", path) of files in the store."""
RECORDING: dict[str, Path | None] = {"store": None}


def _audit(event: str, args: tuple) -> None:
    store = RECORDING["store"]
    if store is None or event != "open" or not isinstance(args[0], str):
        return
    if args[0].startswith(str(store)):
        EVENTS.append(("open", args[0]))


sys.addaudithook(_audit)


@dataclass(frozen=True)
class Published:
    registry: Path
    public_key: Path
    model: Path
    model_id: str


def publish_with_cli(model: Path, base: Path, model_id: str | None = None) -> Published:
    """`keygen` a key and `publish` `model` (compiled for this CPU, through the session's
    artifact cache, so a local run reuses the compile) into a new registry directory."""
    key = base / "keys" / "publisher.key"
    assert main(["keygen", str(key)]) == 0
    registry = base / "registry"
    command = ["publish", str(model), "--target", "llvm", "--registry", str(registry)]
    named = ["--name", model_id] if model_id else []
    assert main([*command, *named, "--signing-key", str(key)]) == 0
    published_id = model_id or model.stem
    return Published(registry, Path(f"{key}.pub"), model, published_id)


@contextmanager
def serving(published: Published, monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryServer]:
    """The registry on loopback HTTP, configured and trusted through the environment; its
    pulls are removed afterwards."""
    with RegistryServer(published.registry) as server:
        monkeypatch.setenv("VLLM_TVM_REGISTRY", server.url)
        monkeypatch.setenv("VLLM_TVM_TRUSTED_KEYS", str(published.public_key))
        yield server
    if pulled_models(published.model_id):
        main(["models", "rm", published.model_id])


@pytest.fixture(scope="module")
def published(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Published:
    """The tiny Llama published under `tiny-llama`."""
    return publish_with_cli(tiny_model_dir("llama"), tmp_path_factory.mktemp("reg"), "tiny-llama")


@pytest.fixture
def served(published: Published, monkeypatch: pytest.MonkeyPatch) -> Iterator[RegistryServer]:
    with serving(published, monkeypatch) as server:
        yield server


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """EVENTS, also holding ("verified", file name) per verified download and ("load",
    path) per library TVM loads."""
    import tvm

    real_verify, real_load = pull_module.verify_file, tvm.runtime.load_module

    def verify_and_record(path, file, raise_error=True):
        verified = real_verify(path, file, raise_error)
        EVENTS.append(("verified", file.name))
        return verified

    def load_and_record(path, *args, **kwargs):
        EVENTS.append(("load", str(path)))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(pull_module, "verify_file", verify_and_record)
    monkeypatch.setattr(tvm.runtime, "load_module", load_and_record)
    EVENTS.clear()
    return EVENTS


def test_a_pulled_artifact_generates_what_a_local_compile_does(
    published: Published, served: RegistryServer, recorded, capfd
) -> None:
    from vllm_tvm.entrypoints.llm import LLM

    local = LLM(published.model, device="cpu", show_progress=False)
    local_ids = local.generate(PROMPT, GREEDY)[0].outputs[0].token_ids
    EVENTS.clear()
    RECORDING["store"] = model_dir(published.model_id).parent
    try:
        pulled = LLM(published.model_id, device="cpu", show_progress=False)
    finally:
        RECORDING["store"] = None
    assert "pulled prebuilt artifact" in capfd.readouterr().err
    assert pulled.generate(PROMPT, GREEDY)[0].outputs[0].token_ids == local_ids

    placed = pulled_models(published.model_id)[0]
    last_verified = max(i for i, (kind, _) in enumerate(EVENTS) if kind == "verified")
    loads = [i for i, (kind, path) in enumerate(EVENTS) if kind == "load"]
    assert loads and min(loads) > last_verified, EVENTS
    assert EVENTS[loads[0]][1] == str(placed.artifact_dir / "model.so")
    before = [path for kind, path in EVENTS[:last_verified] if kind in ("open", "load")]
    assert all(".partial" in path for path in before), before
    placed_opens = [p for kind, p in EVENTS if kind == "open" and p.startswith(str(placed.path))]
    assert placed_opens, "the audit hook saw no open of a placed file"


def test_pull_cli_then_offline_then_models_rm(
    published: Published, served: RegistryServer, capsys
) -> None:
    assert main(["pull", published.model_id, "--target", "llvm"]) == 0
    first = capsys.readouterr().out
    assert "signed by ed25519:" in first and "artifact: " in first
    served.faults.status["index.json"] = 500  # offline must not ask the registry
    assert main(["pull", published.model_id, "--target", "llvm", "--offline"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == first.splitlines()[-2:]
    assert main(["models", "list"]) == 0
    assert published.model_id in capsys.readouterr().out
    assert main(["models", "rm", published.model_id]) == 0
    assert pulled_models(published.model_id) == []
    assert main(["pull", published.model_id, "--target", "llvm", "--offline"]) == 1
    assert "offline: no pulled artifact" in capsys.readouterr().err


def test_pull_says_which_artifacts_exist_and_why_none_fits(
    published: Published, served: RegistryServer, capsys
) -> None:
    assert main(["pull", published.model_id, "--target", "cuda"]) == 1
    err = capsys.readouterr().err
    assert "no prebuilt artifact of 'tiny-llama' fits" in err
    assert "llvm" in err and "this run needs cuda" in err


def test_no_fitting_artifact_pulls_the_checkpoint_and_compiles_locally(
    published: Published, served: RegistryServer, recorded, capfd
) -> None:
    from vllm_tvm.entrypoints.llm import LLM

    # A safetensors checkpoint compiles to the same library in both weight formats, so the
    # local compile is the session's cached one.
    llm = LLM(published.model_id, device="cpu", weight_format="dequantized", show_progress=False)
    err = capfd.readouterr().err
    assert "weight format native, asked for dequantized" in err and "compiling locally" in err
    placed = pulled_models(published.model_id)[0]
    assert placed.artifact_dir is None
    assert llm.model_path == placed.checkpoint_path
    loaded = [path for kind, path in recorded if kind == "load"]
    assert loaded and not loaded[0].startswith(str(placed.path))


def test_generate_takes_a_registry_id_with_the_registry_flags(
    published: Published, served: RegistryServer, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    monkeypatch.delenv("VLLM_TVM_REGISTRY")
    monkeypatch.delenv("VLLM_TVM_TRUSTED_KEYS")
    command = ["generate", "--model", published.model_id, "--prompt", "hello", "--json"]
    flags = ["--registry", served.url, "--trusted-key", str(published.public_key)]
    assert main([*command, "--max-tokens", "3", *flags]) == 0
    captured = capfd.readouterr()
    assert "pulled prebuilt artifact" in captured.err
    assert '"token_ids"' in captured.out


def test_the_default_model_pulled_generates_what_its_local_compile_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    """The embedded default model (Q4_1 GGUF, quantized weights kept native), published and
    pulled under its name; the compile is shared with the session's other default-model
    tests."""
    from vllm_tvm.entrypoints.llm import LLM

    try:
        model = installed_default_model()
    except DefaultModelMissingError as missing:
        pytest.skip(str(missing))
    published = publish_with_cli(model, tmp_path, DEFAULT_MODEL_NAME)
    options = {"device": "cpu", "max_model_len": 256, "show_progress": False}
    prompt = "The capital of France is"
    local = LLM(model, **options).generate(prompt, GREEDY)[0].outputs[0].token_ids
    with serving(published, monkeypatch):
        pulled = LLM(DEFAULT_MODEL_NAME, **options)
        assert "pulled prebuilt artifact" in capfd.readouterr().err
        assert pulled.generate(prompt, GREEDY)[0].outputs[0].token_ids == local


def test_serve_and_bench_take_a_registry_id(published: Published, served: RegistryServer) -> None:
    from vllm_tvm.cli.engine_args import engine_args_from_cli
    from vllm_tvm.cli.main import build_parser
    from vllm_tvm.cli.registry_args import registry_settings_from_cli
    from vllm_tvm.cli.serve_cmd import checked_config
    from vllm_tvm.entrypoints.resolve import resolve_engine

    serve_args = build_parser().parse_args(["serve", published.model_id, "--port", "0"])
    config = checked_config(serve_args)
    placed = pulled_models(published.model_id)[0]
    assert config.served_model_name == [published.model_id]
    assert config.engine.artifact == placed.artifact_dir
    assert Path(config.engine.model) == placed.checkpoint_path
    bench_args = build_parser().parse_args(["bench", "--model", published.model_id])
    bench_engine = engine_args_from_cli(bench_args)
    resolved = resolve_engine(bench_engine, registry_settings_from_cli(bench_args))
    assert resolved.artifact == placed.artifact_dir


def test_a_runtime_only_box_pulls_and_generates(
    published: Published, served: RegistryServer
) -> None:
    """With TVM's runtime alone (no compiler library), as on a serving box."""
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}

    def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "vllm_tvm.cli.main", *arguments]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)

    for subcommand in ("keygen", "publish", "pull", "models"):
        assert cli(subcommand, "--help").returncode == 0, subcommand
    pulled = cli("pull", published.model_id, "--target", "llvm")
    assert pulled.returncode == 0, pulled.stderr[-2000:]
    command = ["generate", "--model", published.model_id, "--offline", "--prompt", "hello"]
    generated = cli(*command, "--max-tokens", "3", "--json")
    assert generated.returncode == 0, generated.stderr[-2000:]
    assert "using the pulled prebuilt artifact" in generated.stderr
    assert 1 <= len(json.loads(generated.stdout)["token_ids"]) <= 3


def test_publish_refuses_an_artifact_of_another_target_or_model(
    tiny_model_dir, tmp_path: Path, capsys
) -> None:
    fake = make_fake_registry(tmp_path)  # its artifact: target llvm, another config
    model = tiny_model_dir("llama")
    command = ["publish", str(model), "--artifact", str(fake.library.parent)]
    command += ["--registry", str(tmp_path / "out"), "--signing-key", str(fake.private_key)]
    assert main([*command, "--target", "cuda"]) == 1
    assert "was built for target 'llvm', not 'cuda:sm_90a'" in capsys.readouterr().err
    assert main([*command, "--target", "llvm"]) == 1
    assert "was built from another model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
