"""checkpoints/model_reference.py: `--model` is a local path or a Hugging Face id found in the
local hub cache, offline; anything else is refused by name.

Oracle: the hub cache layout (models--org--name/snapshots/<rev>/, refs/main) written by hand
in hf_cache_layout.py, the way `huggingface-cli download` leaves it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_cache_layout import add_to_hf_cache
from huggingface_hub import constants

from vllm_tvm.checkpoints.model_config import CheckpointError
from vllm_tvm.checkpoints.model_reference import is_hf_model_id, resolve_model


@pytest.fixture()
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a network fetch would fail, not pass
    return cache


def test_a_cached_model_id_is_its_snapshot_directory(hub_cache: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}", encoding="utf-8")
    snapshot = add_to_hf_cache(hub_cache, "tiny-org/tiny-model", checkpoint)
    assert resolve_model("tiny-org/tiny-model") == snapshot


def test_a_cached_gguf_only_repository_is_its_gguf_file(hub_cache: Path, tmp_path: Path) -> None:
    gguf = tmp_path / "m.Q4_0.gguf"
    gguf.write_bytes(b"GGUF")
    snapshot = add_to_hf_cache(hub_cache, "tiny-org/tiny-gguf", gguf)
    assert resolve_model("tiny-org/tiny-gguf") == snapshot / "m.Q4_0.gguf"


def test_an_uncached_model_id_is_refused_without_downloading(hub_cache: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        resolve_model("tiny-org/not-here")
    message = str(info.value)
    assert "'tiny-org/not-here' is neither a local path nor in the local Hugging Face" in message
    assert str(hub_cache) in message and "does not download" in message


def test_an_existing_local_path_wins_over_the_cache(hub_cache: Path, tmp_path: Path) -> None:
    local = tmp_path / "org" / "name"
    local.mkdir(parents=True)
    assert resolve_model(local) == local


def test_a_missing_path_that_is_not_an_id_is_refused_by_name(hub_cache: Path) -> None:
    with pytest.raises(CheckpointError, match="model path /no/such/model does not exist"):
        resolve_model("/no/such/model")


@pytest.mark.parametrize(
    ("text", "is_id"),
    [
        ("Qwen/Qwen3-0.6B", True),
        ("meta-llama/Llama-3.1-8B-Instruct", True),
        ("/abs/path", False),
        ("./rel/path", False),
        ("a/b/c", False),
        ("model.gguf", False),
    ],
)
def test_model_id_shape(text: str, is_id: bool) -> None:
    assert is_hf_model_id(text) is is_id
