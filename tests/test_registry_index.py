"""The registry's index, keys, publishing and machine fit, without a network: what an entry
fits, which names an index may carry, how keys are made, and how publishing replaces."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from registry_fixtures import MODEL_ID, make_fake_registry

from vllm_tvm.artifact_registry.index import INDEX_NAME, ArtifactEntry, RegistryError, parse_index
from vllm_tvm.artifact_registry.machine import MachineTraits, why_not
from vllm_tvm.artifact_registry.publish import publish
from vllm_tvm.artifact_registry.signing import generate_keypair, sign, verify_index

CPU = MachineTraits("llvm", {"machine": "x86_64", "isa": ["avx2", "fma"]}, "0.27.0")
H200 = MachineTraits("cuda", {"arch": "sm_90"}, "0.27.0")


def entry(**changes) -> ArtifactEntry:
    base = ArtifactEntry(
        target="llvm",
        target_kind="llvm",
        features={"machine": "x86_64", "isa": ["avx2"]},
        dtype="float32",
        weight_format="native",
        tvm_version="0.27.0",
        config_hash="abc",
        architecture="LlamaForCausalLM",
        artifact_files=[],
        checkpoint_name="m.gguf",
        checkpoint_files=[],
    )
    return replace(base, **changes)


def test_an_entry_fits_a_cpu_with_every_extension_it_uses() -> None:
    assert why_not(entry(), CPU, "auto", "native") is None


@pytest.mark.parametrize(
    ("changes", "machine", "dtype", "weight_format", "reason"),
    [
        ({"features": {"machine": "x86_64", "isa": ["avx512f"]}}, CPU, "auto", "native",
         "this CPU lacks avx512f"),
        ({"features": {"machine": "aarch64", "isa": []}}, CPU, "auto", "native",
         "built for aarch64 CPUs"),
        ({"tvm_version": "0.26.0"}, CPU, "auto", "native", "built with TVM 0.26.0"),
        ({}, CPU, "float16", "native", "dtype float32, asked for float16"),
        ({}, CPU, "auto", "dequantized", "weight format native, asked for dequantized"),
        ({}, H200, "auto", "native", "built for llvm, this run needs cuda"),
        ({"target": "cuda:sm_80", "target_kind": "cuda", "features": {"arch": "sm_80"}}, H200,
         "auto", "native", "built for sm_80, this GPU is sm_90"),
        ({"target": "cuda", "target_kind": "cuda", "features": {"arch": "sm_90a"}},
         replace(H200, features={}), "auto", "native", "no CUDA GPU answers"),
    ],
)  # fmt: skip
def test_an_entry_that_does_not_fit_says_why(changes, machine, dtype, weight_format, reason):
    assert reason in why_not(entry(**changes), machine, dtype, weight_format)


def test_an_arch_specific_cuda_entry_fits_its_gpu() -> None:
    sm90a = entry(target="cuda", target_kind="cuda", features={"arch": "sm_90a"})
    assert why_not(sm90a, H200, "auto", "native") is None


def index_bytes(model_id: str, **changes) -> bytes:
    raw = json.loads(make_index_bytes())
    raw["models"] = {model_id: raw["models"]["m"]}
    raw["models"][model_id][0].update(changes)
    return json.dumps(raw).encode()


def make_index_bytes() -> bytes:
    file = {"name": "model.so", "size": 3, "sha256": "0" * 64}
    data = {"schema_version": 1, "models": {"m": [{**vars(entry()), "artifact_files": [file]}]}}
    return json.dumps(data).encode()


def test_a_well_formed_index_parses() -> None:
    assert parse_index(index_bytes("org/model")).models["org/model"][0].dtype == "float32"


@pytest.mark.parametrize(
    ("model_id", "changes", "refusal"),
    [
        ("../escape", {}, "model id"),
        ("a/b/c", {}, "model id"),
        ("m", {"checkpoint_name": "../m.gguf"}, "bad checkpoint name"),
        ("m", {"artifact_files": [{"name": "../x.so", "size": 1, "sha256": "0" * 64}]},
         "not a plain file name"),
        ("m", {"artifact_files": [{"name": "x.so", "size": 1, "sha256": "bad"}]},
         "malformed sha256"),
        ("m", {"dtype": None, "surprise": 1}, "malformed registry entry"),
    ],
)  # fmt: skip
def test_an_index_naming_paths_or_hashes_wrongly_is_refused(model_id, changes, refusal):
    with pytest.raises(RegistryError, match=refusal):
        parse_index(index_bytes(model_id, **changes))


def test_another_schema_version_is_refused() -> None:
    with pytest.raises(RegistryError, match="schema_version 2"):
        parse_index(b'{"schema_version": 2, "models": {}}')


def test_keygen_writes_an_owner_only_key_and_never_overwrites(tmp_path: Path) -> None:
    key = tmp_path / "k"
    public = generate_keypair(key)
    assert public == tmp_path / "k.pub"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    signature = sign(key, b"data")
    assert "signed by ed25519:" in verify_index(b"data", signature, [public], False)
    with pytest.raises(RegistryError, match="refusing to overwrite"):
        generate_keypair(key)


def test_publishing_the_same_build_again_replaces_its_entry(tmp_path: Path) -> None:
    made = make_fake_registry(tmp_path)
    artifact = made.library.parent
    features = {"machine": "x86_64", "isa": ["avx2"], "cpu": "a CPU of this test"}
    args = (artifact, made.checkpoint, MODEL_ID, made.root, made.private_key)
    _, replaced = publish(*args, features, "native")
    assert not replaced
    _, replaced = publish(*args, features, "native")
    assert replaced
    _, replaced = publish(*args, features, "dequantized")
    assert not replaced
    entries = parse_index((made.root / INDEX_NAME).read_bytes()).models[MODEL_ID]
    assert len(entries) == 3
    assert [e.weight_format for e in entries][-2:] == ["native", "dequantized"]


def test_a_runtime_only_bundle_reports_its_tvm_version(tmp_path, monkeypatch) -> None:
    """A runtime bundle on PYTHONPATH has no package metadata: its manifest names the
    version, so its artifacts fit."""
    import importlib.machinery
    import json as json_module
    from importlib import metadata

    from vllm_tvm.artifact_registry import machine
    from vllm_tvm.artifacts.runtime_bundle import MANIFEST_NAME

    (tmp_path / "tvm").mkdir()
    (tmp_path / "tvm" / "__init__.py").write_text("")
    (tmp_path / MANIFEST_NAME).write_text(json_module.dumps({"apache-tvm": "9.9.9"}))

    def no_metadata(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    spec = importlib.machinery.ModuleSpec("tvm", None, origin=str(tmp_path / "tvm" / "__init__.py"))
    monkeypatch.setattr(machine.metadata, "version", no_metadata)
    monkeypatch.setattr(machine.importlib.util, "find_spec", lambda name: spec)
    assert machine.installed_tvm_version() == "9.9.9"
    (tmp_path / MANIFEST_NAME).unlink()
    assert machine.installed_tvm_version() == "none"


def test_a_libcuda_without_the_driver_api_means_no_gpu(monkeypatch) -> None:
    """The CUDA compile loads a link-time stub named libcuda.so.1 into the process; the
    registry's GPU probe must read it as "no GPU", not crash."""
    from vllm_tvm.artifact_registry import machine

    monkeypatch.setattr(machine.ctypes, "CDLL", lambda name: object())
    assert machine.cuda_arch() is None
