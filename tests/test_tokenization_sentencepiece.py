"""SentencePiece `tokenizer.model` files tokenize like the sentencepiece library itself.

Real models: Mistral's v1 (Llama-2 style, 32000 pieces) and v3 (32768, control tokens)
from mistral-common. Tiny models trained on the spot by the sentencepiece trainer cover
options the real ones do not use. Text holding control tokens is left out of the
comparison: sentencepiece never matches them in text, HF (and this runtime) does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenization_material import (
    LLAMA_CPP_MODELS,
    SITE,
    import_sentencepiece,
    read_vocab_vectors,
    require,
)

from vllm_tvm.runtime.tokenization import load_tokenizer
from vllm_tvm.runtime.tokenization.sentencepiece_model import load_sentencepiece_backend

MISTRAL_MODELS = {
    "v1": "tokenizer.model.v1",
    "v3": "mistral_instruct_tokenizer_240323.model.v3",
}
EXTRA_TEXTS = [
    "Hello world",
    "  two leading spaces",
    "trailing spaces   ",
    "a\n\nb\tc",
    "émoji 😀 and accents ü ß",
    "1234567890 3.14159",
    "",
]
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a journey of a thousand miles begins with a single step",
    "to be or not to be that is the question",
    "all that glitters is not gold",
] * 50


def _texts() -> list[str]:
    gguf = LLAMA_CPP_MODELS / "ggml-vocab-llama-spm.gguf"
    vectors = [text for text, _ in read_vocab_vectors(gguf)] if Path(f"{gguf}.inp").exists() else []
    return vectors + EXTRA_TEXTS


def _mistral_model(version: str) -> Path:
    return require(SITE / "mistral_common" / "data" / MISTRAL_MODELS[version])


@pytest.mark.parametrize("version", sorted(MISTRAL_MODELS))
def test_mistral_model_encodes_like_sentencepiece(version: str) -> None:
    spm = import_sentencepiece()
    path = _mistral_model(version)
    reference = spm.SentencePieceProcessor(model_file=str(path))
    backend, _ = load_sentencepiece_backend(path)
    mismatches = [
        (text, got, expected)
        for text in _texts()
        if (got := backend.encode(text, add_special_tokens=False).ids)
        != (expected := reference.encode(text))
    ]
    assert mismatches == []


@pytest.mark.parametrize("version", sorted(MISTRAL_MODELS))
def test_mistral_model_decodes_like_sentencepiece(version: str) -> None:
    spm = import_sentencepiece()
    path = _mistral_model(version)
    reference = spm.SentencePieceProcessor(model_file=str(path))
    backend, _ = load_sentencepiece_backend(path)
    for text in _texts():
        ids = reference.encode(text)
        assert backend.decode(ids) == reference.decode(ids)


def test_control_tokens_in_text_are_matched_as_special_tokens() -> None:
    backend, model = load_sentencepiece_backend(_mistral_model("v3"))
    ids = backend.encode("[INST] hi [/INST]", add_special_tokens=False).ids
    assert ids[0] == model.pieces.index("[INST]")
    assert ids[-1] == model.pieces.index("[/INST]")


def _write_hf_dir(tmp_path: Path, model: Path, config: dict[str, Any]) -> Path:
    (tmp_path / "tokenizer.model").write_bytes(model.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_hf_directory_with_tokenizer_model_prepends_bos_like_sentencepiece(tmp_path: Path) -> None:
    spm = import_sentencepiece()
    path = _mistral_model("v1")
    model_dir = _write_hf_dir(
        tmp_path, path, {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}
    )
    tokenizer = load_tokenizer(model_dir)
    reference = spm.SentencePieceProcessor(model_file=str(path))
    assert tokenizer.encode("Hello world") == reference.encode("Hello world", add_bos=True)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_ids) == (1, [2])


def test_added_tokens_declared_in_config_extend_the_vocabulary(tmp_path: Path) -> None:
    config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "added_tokens_decoder": {
            "32000": {"content": "<|im_end|>", "special": True},
            "32001": {"content": "<tool>", "special": False},
        },
    }
    tokenizer = load_tokenizer(_write_hf_dir(tmp_path, _mistral_model("v1"), config))
    ids = tokenizer.encode("a<|im_end|>b<tool>", add_special_tokens=False)
    assert 32000 in ids and 32001 in ids
    assert tokenizer.decode(ids) == "a b<tool>"
    assert tokenizer.vocab_size == 32002


def _train(tmp_path: Path, **options: Any) -> Path:
    spm = import_sentencepiece()
    prefix = tmp_path / "tiny"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_prefix=str(prefix),
        minloglevel=2,
        hard_vocab_limit=False,
        **{"vocab_size": 60, "remove_extra_whitespaces": False, **options},
    )
    return Path(f"{prefix}.model")


def test_unigram_model_is_refused_by_name(tmp_path: Path) -> None:
    path = _train(tmp_path, model_type="unigram", vocab_size=40)
    with pytest.raises(ValueError, match="model_type 'unigram'; supported: bpe"):
        load_sentencepiece_backend(path)


def test_whitespace_collapsing_model_is_refused_by_option(tmp_path: Path) -> None:
    path = _train(tmp_path, model_type="bpe", remove_extra_whitespaces=True)
    with pytest.raises(ValueError, match="remove_extra_whitespaces=true; supported: false"):
        load_sentencepiece_backend(path)


@pytest.mark.parametrize(
    "options",
    [
        {"byte_fallback": True, "vocab_size": 400},
        {"add_dummy_prefix": False, "user_defined_symbols": ["<sep>", "fox"]},
        {"control_symbols": ["<ctl>"], "normalization_rule_name": "identity"},
    ],
    ids=["byte_fallback_nfkc", "no_dummy_prefix_user_symbols", "identity_normalizer"],
)
def test_tiny_bpe_model_encodes_like_sentencepiece(tmp_path: Path, options: dict[str, Any]) -> None:
    spm = import_sentencepiece()
    path = _train(tmp_path, model_type="bpe", **options)
    reference = spm.SentencePieceProcessor(model_file=str(path))
    backend, _ = load_sentencepiece_backend(path)
    texts = [
        "the quick fox",
        "  jumps   over  ",
        "glitters<sep>gold fox",
        "unseen zebra \u2126 \uff21\u2460",  # ohm sign, fullwidth A, circled 1: NFKC maps them
        "a\nthousand\tsteps",
    ]
    for text in texts:
        assert backend.encode(text, add_special_tokens=False).ids == reference.encode(text), text


def test_file_that_is_not_a_sentencepiece_model_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.model"
    path.write_text("IQ== 0\nIg== 1\n")  # tiktoken ranks, as Meta's Llama-3 ships
    with pytest.raises(ValueError, match="is not a SentencePiece model"):
        load_sentencepiece_backend(path)
