"""`pull` against a loopback HTTP registry that injects faults, and the same flows through
`huggingface_hub` against a local Hugging Face-style endpoint: resumed downloads, refused
bytes and signatures, HTTP errors, stalls; and the store a successful pull leaves."""

from __future__ import annotations

from pathlib import Path

import pytest
from registry_fixtures import MODEL_ID, FakeRegistry, make_fake_registry
from registry_server import RegistryServer

from vllm_tvm.artifact_registry.index import SIGNATURE_NAME, RegistryError
from vllm_tvm.artifact_registry.machine import this_machine
from vllm_tvm.artifact_registry.pull import TrustPolicy, choose_entry, pull_entry, read_index
from vllm_tvm.artifact_registry.signing import generate_keypair
from vllm_tvm.artifact_registry.sources import open_source
from vllm_tvm.artifact_registry.store import PulledModel, pulled_models, remove, store_root
from vllm_tvm.artifacts.compile_options import CompileOptions


class RecordingBar:
    """A progress bar that remembers how many bytes it was told about."""

    def __init__(self) -> None:
        self.count = 0

    def update(self, n: int) -> None:
        self.count += n

    def reset(self, total: int | None = None) -> None:
        self.count = 0


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeRegistry:
    monkeypatch.setenv("VLLM_TVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VLLM_TVM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("VLLM_TVM_TRUSTED_KEYS", raising=False)
    return make_fake_registry(tmp_path / "made")


@pytest.fixture
def server(registry: FakeRegistry):
    with RegistryServer(registry.root) as running:
        yield running


@pytest.fixture(params=["http", "hf"])
def remote(request, server: RegistryServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """The loopback registry as an HTTP base URL, or as a Hugging Face repo on a local
    endpoint (HF_ENDPOINT)."""
    if request.param == "http":
        return server.url
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return "hf://acme/tiny-registry"


def pull(
    spec: str,
    registry: FakeRegistry,
    trusted: tuple[Path, ...] | None = None,
    allow_unsigned: bool = False,
    timeout: float = 10.0,
    bars: list[RecordingBar] | None = None,
) -> PulledModel:
    keys = (registry.public_key,) if trusted is None else trusted
    signed = read_index(open_source(spec, timeout), TrustPolicy(keys, allow_unsigned))
    entry = choose_entry(signed, MODEL_ID, this_machine("llvm"), CompileOptions(MODEL_ID))

    def progress(name: str, size: int, position: int) -> RecordingBar:
        bar = RecordingBar()
        (bars if bars is not None else []).append(bar)
        return bar

    return pull_entry(signed, MODEL_ID, entry, progress)


def assert_store_empty() -> None:
    """No file of the pull is left (the empty per-entry lock file may stay)."""
    root = store_root()
    files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    assert [p for p in files if p.suffix != ".lock" or p.stat().st_size] == []


def test_a_pull_places_the_exact_bytes(remote: str, registry: FakeRegistry) -> None:
    pulled = pull(remote, registry)
    assert pulled.artifact_dir is not None
    assert (pulled.artifact_dir / "model.so").read_bytes() == registry.library.read_bytes()
    assert pulled.checkpoint_path.read_bytes() == registry.checkpoint.read_bytes()
    assert [m.path for m in pulled_models(MODEL_ID)] == [pulled.path]
    assert "signed by ed25519:" in pulled.origin["trust"]


def test_a_dropped_connection_is_resumed(
    remote: str, registry: FakeRegistry, server: RegistryServer
) -> None:
    blob = registry.blob_of("model.so")
    server.faults.drop_after[blob] = 100_000
    pulled = pull(remote, registry)
    assert (pulled.artifact_dir / "model.so").read_bytes() == registry.library.read_bytes()
    ranges = server.gets_of(blob)
    assert len(ranges) == 2, ranges
    if remote.startswith("http"):
        # huggingface_hub reads in 10 MB chunks, so it saw none of the 100 kB and restarts.
        assert ranges[1] == "bytes=100000-", ranges


def test_a_flipped_byte_is_refused_by_name_and_nothing_is_kept(
    remote: str, registry: FakeRegistry, server: RegistryServer
) -> None:
    server.faults.flip_byte[registry.blob_of("model.so")] = 12_345
    with pytest.raises(RegistryError, match=r"model\.so has sha256 .* refused"):
        pull(remote, registry)
    assert_store_empty()


def test_a_missing_signature_is_refused_unless_allowed(
    remote: str, registry: FakeRegistry, server: RegistryServer
) -> None:
    server.faults.absent.add(SIGNATURE_NAME)
    with pytest.raises(RegistryError, match="not signed"):
        pull(remote, registry)
    assert_store_empty()
    pulled = pull(remote, registry, allow_unsigned=True)
    assert "--allow-unsigned" in pulled.origin["trust"]


def test_a_signature_by_another_key_is_refused_unless_allowed(
    remote: str, registry: FakeRegistry, tmp_path: Path
) -> None:
    stranger = generate_keypair(tmp_path / "stranger.key")
    with pytest.raises(RegistryError, match="verifies with none of the trusted keys"):
        pull(remote, registry, trusted=(stranger,))
    assert pull(remote, registry, trusted=(stranger,), allow_unsigned=True).artifact_dir


def test_an_index_changed_after_signing_is_refused(registry: FakeRegistry) -> None:
    index = registry.root / "index.json"
    index.write_bytes(index.read_bytes().replace(b'"float32"', b'"float16"'))
    with pytest.raises(RegistryError, match="verifies with none"):
        pull(str(registry.root), registry)


def test_no_trusted_key_is_refused_naming_where_keys_come_from(registry: FakeRegistry) -> None:
    with pytest.raises(RegistryError, match="--trusted-key"):
        pull(str(registry.root), registry, trusted=())


@pytest.mark.parametrize("status", [404, 500])
def test_http_errors_are_reported_clearly(
    remote: str,
    registry: FakeRegistry,
    server: RegistryServer,
    status: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub.utils._http as hub_http

    # huggingface_hub backs off 1 + 2 + 4 + 8 + 8 s on a 500 before it gives up.
    monkeypatch.setattr(hub_http.time, "sleep", lambda seconds: None)
    server.faults.status[registry.blob_of("model.so")] = status
    with pytest.raises(RegistryError, match=str(status)):
        pull(remote, registry)
    assert not pulled_models()


def test_a_missing_index_is_reported(remote: str, registry: FakeRegistry, server) -> None:
    server.faults.absent.add("index.json")
    with pytest.raises(RegistryError, match=r"no index\.json"):
        pull(remote, registry)


def test_a_stalled_server_shows_progress_then_times_out(
    registry: FakeRegistry, server: RegistryServer
) -> None:
    server.faults.stall_after[registry.blob_of("model.so")] = (50_000, 5.0)
    bars: list[RecordingBar] = []
    with pytest.raises(RegistryError, match="timed out"):
        pull(server.url, registry, timeout=0.5, bars=bars)
    assert max(bar.count for bar in bars) >= 50_000
    assert not pulled_models()


def test_a_stalled_hugging_face_endpoint_times_out(
    registry: FakeRegistry, server: RegistryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 0.5)
    server.faults.stall_after[registry.blob_of("model.so")] = (50_000, 5.0)
    with pytest.raises(RegistryError, match="ReadTimeout"):
        pull("hf://acme/tiny-registry", registry)
    assert not pulled_models()


def test_a_second_pull_downloads_nothing(registry: FakeRegistry, server: RegistryServer) -> None:
    first = pull(server.url, registry)
    blob_gets = sum(1 for method, path, _ in server.requests if path.startswith("blobs/"))
    assert pull(server.url, registry).path == first.path
    assert sum(1 for _, path, _ in server.requests if path.startswith("blobs/")) == blob_gets


def test_an_interrupted_pull_is_resumed_by_the_next_one(
    registry: FakeRegistry, server: RegistryServer
) -> None:
    blob = registry.blob_of("model.so")
    server.faults.stall_after[blob] = (50_000, 2.0)
    with pytest.raises(RegistryError, match="timed out"):
        pull(server.url, registry, timeout=0.3)
    del server.faults.stall_after[blob]
    pulled = pull(server.url, registry)
    assert (pulled.artifact_dir / "model.so").read_bytes() == registry.library.read_bytes()
    last_range = server.gets_of(blob)[-1]
    assert last_range is not None and int(last_range[6:-1]) >= 50_000, last_range


def test_models_rm_also_drops_an_unfinished_pull(
    registry: FakeRegistry, server: RegistryServer
) -> None:
    server.faults.stall_after[registry.blob_of("model.so")] = (50_000, 2.0)
    with pytest.raises(RegistryError, match="timed out"):
        pull(server.url, registry, timeout=0.3)
    assert any(p.stat().st_size for p in store_root().rglob("*.partial") if p.is_file())
    assert remove(MODEL_ID)
    assert_store_empty()
