"""GGUF vocabularies reproduce llama.cpp's golden tokenizations (made with HF tokenizers).

Each `ggml-vocab-*.gguf` in llama.cpp's `models/` comes with `.inp` texts and the `.out` ids
that the original HF tokenizer gives them (`encode(text, add_special_tokens=False)`).
Families this project does not support must be refused by name at load time.
"""

from __future__ import annotations

import pytest
from tokenization_material import (
    LLAMA_CPP_MODELS,
    VOCABS_WITH_VECTORS,
    read_vocab_vectors,
    require,
)

from vllm_tvm.runtime.tokenization import load_tokenizer

SUPPORTED_WITH_VECTORS = VOCABS_WITH_VECTORS
# vocab name -> the tokenizer.ggml.model value the refusal must name
REFUSED = {"bert-bge": "bert", "nomic-bert-moe": "t5"}
LOADABLE_WITHOUT_VECTORS = ["aquila", "baichuan", "gpt-neox"]


@pytest.mark.parametrize("name", SUPPORTED_WITH_VECTORS)
def test_vocab_encodes_every_llama_cpp_vector(name: str) -> None:
    gguf = require(LLAMA_CPP_MODELS / f"ggml-vocab-{name}.gguf")
    tokenizer = load_tokenizer(gguf)
    vectors = read_vocab_vectors(gguf)
    assert len(vectors) >= 40
    mismatches = [
        (text, expected, got)
        for text, expected in vectors
        if (got := tokenizer.encode(text, add_special_tokens=False)) != expected
    ]
    assert mismatches == []


@pytest.mark.parametrize("name", ["gemma-4", "gpt-2", "llama-bpe", "qwen2", "starcoder"])
def test_vocab_decodes_vectors_back_to_their_text(name: str) -> None:
    gguf = require(LLAMA_CPP_MODELS / f"ggml-vocab-{name}.gguf")
    tokenizer = load_tokenizer(gguf)
    for text, ids in read_vocab_vectors(gguf):
        assert tokenizer.decode(ids) == text


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsupported_tokenizer_model_is_refused_by_name(name: str) -> None:
    gguf = require(LLAMA_CPP_MODELS / f"ggml-vocab-{name}.gguf")
    with pytest.raises(ValueError, match=rf"tokenizer\.ggml\.model '{REFUSED[name]}'") as info:
        load_tokenizer(gguf)
    assert "supported: gemma4, gpt2, llama" in str(info.value)


@pytest.mark.parametrize("name", LOADABLE_WITHOUT_VECTORS)
def test_vocab_without_vectors_loads_and_round_trips(name: str) -> None:
    tokenizer = load_tokenizer(require(LLAMA_CPP_MODELS / f"ggml-vocab-{name}.gguf"))
    text = "Hello world, 1234 tokens!"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_spm_vocab_prepends_bos_by_default() -> None:
    tokenizer = load_tokenizer(require(LLAMA_CPP_MODELS / "ggml-vocab-llama-spm.gguf"))
    assert tokenizer.add_bos_token is True
    assert tokenizer.encode("Hello")[0] == tokenizer.bos_token_id == 1
    assert tokenizer.eos_token_ids[0] == 2


def test_end_of_turn_control_tokens_join_the_eos_ids() -> None:
    # llama.cpp also stops generation on control tokens such as <|im_end|> (its EOG set)
    tokenizer = load_tokenizer(require(LLAMA_CPP_MODELS / "ggml-vocab-qwen2.gguf"))
    im_end = tokenizer.backend.token_to_id("<|im_end|>")
    assert tokenizer.eos_token_ids[0] == 151643
    assert im_end in tokenizer.eos_token_ids
