"""Read a SentencePiece `tokenizer.model` file without the sentencepiece or protobuf packages.

Why: Llama-2, Mistral and many other HF checkpoints ship only `tokenizer.model`. The file
is a serialized `sentencepiece.ModelProto`; the runtime needs just its pieces (text, score,
type), the model type and a few normalizer flags, which a small protobuf wire-format reader
extracts. The result feeds `sentencepiece_bpe.build_sentencepiece_bpe`.

Fields read (from sentencepiece_model.proto):
  ModelProto:     1 pieces (repeated), 2 trainer_spec, 3 normalizer_spec
  SentencePiece:  1 piece, 2 score (float), 3 type (enum, default NORMAL)
  TrainerSpec:    3 model_type (UNIGRAM=1 default, BPE=2, WORD=3, CHAR=4),
                  24 treat_whitespace_as_suffix, 35 byte_fallback, 40 unk_id (default 0)
  NormalizerSpec: 1 name, 2 precompiled_charsmap, 3 add_dummy_prefix (default true),
                  4 remove_extra_whitespaces (default true), 5 escape_whitespaces (default true)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.runtime.tokenization.byte_level_bpe import AddedTokenSpec
from vllm_tvm.runtime.tokenization.sentencepiece_bpe import PieceType, build_sentencepiece_bpe

MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
SUPPORTED_MODEL_TYPES = ("bpe",)


@dataclass
class SentencePieceModel:
    """The parts of a SentencePiece model that define how it tokenizes."""

    pieces: list[str]
    scores: list[float]
    types: list[int]
    model_type: str = "unigram"
    byte_fallback: bool = False
    unk_id: int = 0
    treat_whitespace_as_suffix: bool = False
    normalizer_name: str = ""
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes | float]]:
    """(field number, value) pairs of one protobuf message: varints as int, length-delimited
    as bytes, 32-bit as float, 64-bit as int."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield number, buf[pos : pos + length]
            pos += length
        elif wire == 5:
            yield number, struct.unpack_from("<f", buf, pos)[0]
            pos += 4
        elif wire == 1:
            yield number, struct.unpack_from("<q", buf, pos)[0]
            pos += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}; supported: 0, 1, 2, 5")


def parse_sentencepiece_model(data: bytes) -> SentencePieceModel:
    """Decode a serialized `sentencepiece.ModelProto`."""
    model = SentencePieceModel(pieces=[], scores=[], types=[])
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            piece, score, kind = "", 0.0, int(PieceType.NORMAL)
            for sub, sub_value in _fields(value):
                if sub == 1 and isinstance(sub_value, bytes):
                    piece = sub_value.decode("utf-8")
                elif sub == 2 and isinstance(sub_value, float):
                    score = sub_value
                elif sub == 3 and isinstance(sub_value, int):
                    kind = sub_value
            model.pieces.append(piece)
            model.scores.append(score)
            model.types.append(kind)
        elif number == 2 and isinstance(value, bytes):
            for sub, sub_value in _fields(value):
                if sub == 3 and isinstance(sub_value, int):
                    model.model_type = MODEL_TYPES.get(sub_value, str(sub_value))
                elif sub == 24:
                    model.treat_whitespace_as_suffix = bool(sub_value)
                elif sub == 35:
                    model.byte_fallback = bool(sub_value)
                elif sub == 40 and isinstance(sub_value, int):
                    model.unk_id = sub_value
        elif number == 3 and isinstance(value, bytes):
            for sub, sub_value in _fields(value):
                if sub == 1 and isinstance(sub_value, bytes):
                    model.normalizer_name = sub_value.decode("utf-8")
                elif sub == 2 and isinstance(sub_value, bytes):
                    model.precompiled_charsmap = sub_value
                elif sub == 3:
                    model.add_dummy_prefix = bool(sub_value)
                elif sub == 4:
                    model.remove_extra_whitespaces = bool(sub_value)
                elif sub == 5:
                    model.escape_whitespaces = bool(sub_value)
    return model


def load_sentencepiece_backend(
    path: str | Path, added: Mapping[int, AddedTokenSpec] | None = None
) -> tuple[HFTokenizer, SentencePieceModel]:
    """The HF tokenizer equivalent to the SentencePiece model file at `path` (plus `added`
    tokens by id, from HF configs), and the parsed model.

    Raises `ValueError` for a file that is not a SentencePiece model, for model types other
    than BPE, and for the options whose whole-text semantics HF's per-segment normalizers
    cannot reproduce (`remove_extra_whitespaces`, `treat_whitespace_as_suffix`).
    """
    try:
        model = parse_sentencepiece_model(Path(path).read_bytes())
    except (ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:
        raise ValueError(f"{path} is not a SentencePiece model protobuf ({exc})") from exc
    if not model.pieces:
        raise ValueError(f"{path} is not a SentencePiece model protobuf (it has no pieces)")
    if model.model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"{path}: unsupported SentencePiece model_type {model.model_type!r}; "
            f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    for option in ("treat_whitespace_as_suffix", "remove_extra_whitespaces"):
        if getattr(model, option):
            raise ValueError(
                f"{path}: unsupported SentencePiece option {option}=true; supported: false"
            )
    backend = build_sentencepiece_bpe(
        model.pieces,
        model.scores,
        model.types,
        add_dummy_prefix=model.add_dummy_prefix,
        precompiled_charsmap=model.precompiled_charsmap,
        unk_id=model.unk_id,
        added=added,
    )
    return backend, model
