"""The GGUF metadata reader returns what the `gguf` package's writer stored, and GGUF
tokenizer metadata with unknown names is refused with the accepted names listed."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFEndian, GGUFValueType, GGUFWriter

from vllm_tvm.checkpoints.gguf_file import GGUFFormatError, read_gguf_metadata
from vllm_tvm.runtime.tokenization import load_tokenizer

SCALARS = [
    ("t.u8", 200, GGUFValueType.UINT8),
    ("t.i8", -100, GGUFValueType.INT8),
    ("t.u16", 60000, GGUFValueType.UINT16),
    ("t.i16", -30000, GGUFValueType.INT16),
    ("t.u32", 4_000_000_000, GGUFValueType.UINT32),
    ("t.i32", -2_000_000_000, GGUFValueType.INT32),
    ("t.f32", 0.5, GGUFValueType.FLOAT32),
    ("t.bool", True, GGUFValueType.BOOL),
    ("t.str", "héllo ▁ 你好", GGUFValueType.STRING),
    ("t.u64", 2**40, GGUFValueType.UINT64),
    ("t.i64", -(2**40), GGUFValueType.INT64),
    ("t.f64", 1e-300, GGUFValueType.FLOAT64),
]


def _write(path: Path, endianess: GGUFEndian = GGUFEndian.LITTLE, **arrays: list) -> Path:
    writer = GGUFWriter(str(path), "llama", endianess=endianess)
    for key, value, vtype in SCALARS:
        writer.add_key_value(key, value, vtype)
    for key, values in arrays.items():
        writer.add_array(key.replace("__", "."), values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("endianess", [GGUFEndian.LITTLE, GGUFEndian.BIG])
def test_every_value_type_reads_back_as_written(tmp_path: Path, endianess: GGUFEndian) -> None:
    path = _write(
        tmp_path / "t.gguf",
        endianess,
        t__strings=["a", "", "▁b c", "<|im_end|>"],
        t__ints=[1, -2, 3],
        t__floats=[0.25, -1.5],
        t__bools=[True, False],
    )
    meta = read_gguf_metadata(path)
    assert meta["general.architecture"] == "llama"
    for key, value, _ in SCALARS:
        assert meta[key] == value
    assert meta["t.strings"] == ["a", "", "▁b c", "<|im_end|>"]
    assert meta["t.ints"] == [1, -2, 3]
    assert meta["t.floats"] == [0.25, -1.5]
    assert meta["t.bools"] == [True, False]


def test_file_without_gguf_magic_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGML" + bytes(20))
    with pytest.raises(GGUFFormatError, match="not a GGUF file"):
        read_gguf_metadata(path)


def test_unsupported_gguf_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "v1.gguf"
    path.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    with pytest.raises(GGUFFormatError, match="unsupported GGUF version 1; supported: 2, 3"):
        read_gguf_metadata(path)


def _tiny_vocab_gguf(path: Path, pre: str | None, model: str = "gpt2") -> Path:
    writer = GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(["a", "b", "ab", "<|end|>"])
    writer.add_token_types([1, 1, 1, 3])
    writer.add_token_merges(["a b"])
    writer.add_eos_token_id(3)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def test_unknown_pre_tokenizer_name_is_refused_with_the_accepted_names(tmp_path: Path) -> None:
    path = _tiny_vocab_gguf(tmp_path / "v.gguf", "frobnicator")
    with pytest.raises(ValueError, match=r"tokenizer\.ggml\.pre 'frobnicator'") as info:
        load_tokenizer(path)
    assert "smollm" in str(info.value) and "llama-bpe" in str(info.value)


def test_missing_pre_tokenizer_name_falls_back_to_the_default_family(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(_tiny_vocab_gguf(tmp_path / "v.gguf", None))
    assert tokenizer.encode("abab<|end|>") == [2, 2, 3]
    assert tokenizer.eos_token_ids == [3]


def test_unknown_tokenizer_model_is_refused(tmp_path: Path) -> None:
    path = _tiny_vocab_gguf(tmp_path / "v.gguf", None, model="rwkv")
    with pytest.raises(
        ValueError, match=r"tokenizer\.ggml\.model 'rwkv'; supported: gemma4, gpt2, llama"
    ):
        load_tokenizer(path)
