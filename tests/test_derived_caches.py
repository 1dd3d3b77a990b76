"""The caches of what a start derives from a GGUF checkpoint (its tokenizer, its repacked
weight planes): a valid entry is used, a stale or corrupt one is ignored and rebuilt, and
what comes out of the cache equals what is built from the file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenization_material import SMOLLM2_GGUF, require

from vllm_tvm.artifacts import derived_cache
from vllm_tvm.artifacts.manifest import ParamEntry
from vllm_tvm.checkpoints import gguf_repack
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights
from vllm_tvm.checkpoints.weight_formats import quant_format
from vllm_tvm.runtime.tokenization import gguf_tokenizer_cache, gguf_vocab
from vllm_tvm.runtime.weights import plane_cache

TEXTS = ["Once upon a time", "unicode: héllo — 你好 🦙", "<|im_start|>user\nHi<|im_end|>\n"]


@pytest.fixture()
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("VLLM_TVM_CACHE_DIR", str(cache))
    return cache


@pytest.fixture(scope="module")
def gguf_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the default model, so tests may change its mtime."""
    return Path(shutil.copy(require(SMOLLM2_GGUF), tmp_path_factory.mktemp("model")))


def _store(checkpoint: Path, version: str = "v1") -> Path | None:
    return derived_cache.write_entry(
        "test", checkpoint, version, lambda d: (d / "data.bin").write_bytes(b"derived" * 100)
    )


def _flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(data)


def test_stored_entry_is_found_by_the_same_key(tmp_path: Path, cache_dir: Path) -> None:
    checkpoint = tmp_path / "model.gguf"
    checkpoint.write_bytes(b"weights")
    stored = _store(checkpoint)
    assert stored is not None and stored.is_relative_to(cache_dir)
    assert derived_cache.read_entry("test", checkpoint, "v1") == stored
    assert not list(stored.parent.glob("*.tmp"))


def test_changed_checkpoint_or_code_version_misses(tmp_path: Path, cache_dir: Path) -> None:
    checkpoint = tmp_path / "model.gguf"
    checkpoint.write_bytes(b"weights")
    _store(checkpoint)
    assert derived_cache.read_entry("test", checkpoint, "v2") is None
    stat = checkpoint.stat()
    os.utime(checkpoint, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert derived_cache.read_entry("test", checkpoint, "v1") is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "index", "delete"])
def test_corrupt_entry_is_ignored(tmp_path: Path, cache_dir: Path, damage: str) -> None:
    checkpoint = tmp_path / "model.gguf"
    checkpoint.write_bytes(b"weights")
    stored = _store(checkpoint)
    assert stored is not None
    data = stored / "data.bin"
    if damage == "flip":
        _flip_byte(data, 10)
    elif damage == "truncate":
        data.write_bytes(data.read_bytes()[:-1])
    elif damage == "index":
        (stored / derived_cache.INDEX_NAME).write_text("{not json", encoding="utf-8")
    else:
        data.unlink()
    assert derived_cache.read_entry("test", checkpoint, "v1") is None
    assert _store(checkpoint) is not None
    assert derived_cache.read_entry("test", checkpoint, "v1") is not None


def test_code_version_follows_the_source_bytes(tmp_path: Path) -> None:
    source = tmp_path / "builder.py"
    source.write_text("A = 1\n")
    before = derived_cache.code_version([source], "lib 1")
    assert derived_cache.code_version([source], "lib 2") != before
    source.write_text("A = 2\n")
    assert derived_cache.code_version([source], "lib 1") != before


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    built: list[Path] = []
    build = gguf_vocab.load_gguf_tokenizer

    def counting(path: Path):  # type: ignore[no-untyped-def]
        built.append(path)
        return build(path)

    monkeypatch.setattr(gguf_vocab, "load_gguf_tokenizer", counting)
    return built


def test_cached_tokenizer_equals_the_built_one(
    gguf_copy: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _count_builds(monkeypatch)
    first = gguf_tokenizer_cache.load_cached_gguf_tokenizer(gguf_copy)
    second = gguf_tokenizer_cache.load_cached_gguf_tokenizer(gguf_copy)
    assert len(built) == 1, "the second load must come from the cache"
    for field in ("bos_token_id", "eos_token_ids", "add_bos_token", "chat_template"):
        assert getattr(second, field) == getattr(first, field)
    assert (second.bos_token, second.eos_token) == (first.bos_token, first.eos_token)
    assert second.named_chat_templates == first.named_chat_templates
    assert second.vocab_size == first.vocab_size
    for text in TEXTS:
        assert second.encode(text) == first.encode(text)
        ids = first.encode(text)
        assert second.decode(ids, skip_special_tokens=False) == first.decode(ids, False)


@pytest.mark.parametrize("damage", ["corrupt", "stale"])
def test_tokenizer_cache_rebuilds_a_bad_entry(
    gguf_copy: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    gguf_tokenizer_cache.load_cached_gguf_tokenizer(gguf_copy)
    entry = derived_cache.read_entry(
        gguf_tokenizer_cache.KIND, gguf_copy, gguf_tokenizer_cache.builder_version()
    )
    assert entry is not None
    if damage == "corrupt":
        _flip_byte(entry / gguf_tokenizer_cache.BACKEND_FILE, 0)
    else:
        stat = gguf_copy.stat()
        os.utime(gguf_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    built = _count_builds(monkeypatch)
    rebuilt = gguf_tokenizer_cache.load_cached_gguf_tokenizer(gguf_copy)
    assert len(built) == 1
    assert rebuilt.encode(TEXTS[0]) == [6403, 1980, 253, 655]


def _q4_1_entries(source: GGUFWeights) -> list[ParamEntry]:
    """Every plane of two Q4_1 projections, the second fused from two tensors."""
    fmt = quant_format("q4_1")
    weights = [
        ["model.layers.0.self_attn.o_proj.weight"],
        ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"],
    ]
    entries = []
    for index, names in enumerate(weights):
        parts = [gguf_repack.repack(source.raw(name), fmt) for name in names]
        for plane in fmt.planes:
            array = np.concatenate([part[plane.name] for part in parts], axis=0)
            entries.append(
                ParamEntry(
                    name=f"w{index}.{plane.name}",
                    shape=list(array.shape),
                    dtype=str(array.dtype),
                    sources=names,
                    format=fmt.name,
                    plane=plane.name,
                )
            )
    return entries


def _planes(entries: list[ParamEntry], source: GGUFWeights) -> dict[str, np.ndarray]:
    plane_of = plane_cache.quantized_planes(entries, source)
    return {entry.name: np.array(plane_of(entry)) for entry in entries}


def _count_repacks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    repacked: list[str] = []
    repack = gguf_repack.repack

    def counting(raw, fmt):  # type: ignore[no-untyped-def]
        repacked.append(fmt.name)
        return repack(raw, fmt)

    monkeypatch.setattr("vllm_tvm.runtime.weights.quantized_params.repack", counting)
    return repacked


def test_cached_planes_equal_the_repacked_ones(
    gguf_copy: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = GGUFWeights(gguf_copy)
    entries = _q4_1_entries(source)
    expected = {
        entry.name: np.array(array)
        for entry, array in zip(
            entries, map(plane_cache.QuantizedPlanes(source).get, entries), strict=True
        )
    }
    repacked = _count_repacks(monkeypatch)
    first = _planes(entries, source)
    assert repacked, "a miss repacks"
    repacked.clear()
    second = _planes(entries, source)
    assert not repacked, "a hit reads the stored planes"
    for name, array in expected.items():
        np.testing.assert_array_equal(first[name], array)
        np.testing.assert_array_equal(second[name], array)
        assert second[name].dtype == array.dtype


@pytest.mark.parametrize("damage", ["corrupt", "stale", "layout"])
def test_plane_cache_rebuilds_a_bad_entry(
    gguf_copy: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    source = GGUFWeights(gguf_copy)
    entries = _q4_1_entries(source)
    expected = _planes(entries, source)
    entry_dir = derived_cache.read_entry(
        plane_cache.KIND, gguf_copy, plane_cache.entry_version(entries)
    )
    assert entry_dir is not None
    if damage == "corrupt":
        _flip_byte(entry_dir / plane_cache.DATA_FILE, 100)
    elif damage == "stale":
        stat = gguf_copy.stat()
        os.utime(gguf_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    else:
        entries = entries[1:]
    repacked = _count_repacks(monkeypatch)
    rebuilt = _planes(entries, source)
    assert repacked
    for entry in entries:
        np.testing.assert_array_equal(rebuilt[entry.name], expected[entry.name])


def test_a_failing_derivation_leaves_nothing_behind(tmp_path: Path, cache_dir: Path) -> None:
    checkpoint = tmp_path / "model.gguf"
    checkpoint.write_bytes(b"weights")

    def fail(directory: Path) -> None:
        (directory / "half.bin").write_bytes(b"half")
        raise ValueError("derivation failed")

    with pytest.raises(ValueError, match="derivation failed"):
        derived_cache.write_entry("test", checkpoint, "v1", fail)
    assert derived_cache.read_entry("test", checkpoint, "v1") is None
    assert not any(cache_dir.rglob("*.bin"))
