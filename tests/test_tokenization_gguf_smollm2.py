"""The product's default model, SmolLM2-135M-Instruct as GGUF: its tokenizer and chat
template match what HF transformers builds from the same file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tokenization_material import SMOLLM2_GGUF, require

from vllm_tvm.runtime.tokenization import Tokenizer, load_tokenizer

TEXTS = [
    "Once upon a time",
    "Hello, world! 1234567890",
    "  leading and trailing spaces  ",
    "line one\nline two\n\n\ttabbed",
    "unicode: héllo wörld — 你好\uff0c世界 🦙🦙",
    "code: def f(x):\n    return x**2  # square",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "don't won't it's they'll I'm we've",
]
CONVERSATION = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]


@pytest.fixture(scope="module")
def ours() -> Tokenizer:
    return load_tokenizer(require(SMOLLM2_GGUF))


@pytest.fixture(scope="module")
def reference() -> Any:
    transformers = pytest.importorskip("transformers")
    gguf = require(SMOLLM2_GGUF)
    return transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def test_once_upon_a_time_encodes_without_bos(ours: Tokenizer) -> None:
    assert ours.encode("Once upon a time") == [6403, 1980, 253, 655]


def test_special_token_facts_come_from_the_gguf_metadata(ours: Tokenizer) -> None:
    assert ours.add_bos_token is False
    assert (ours.bos_token_id, ours.bos_token) == (1, "<|im_start|>")
    assert ours.eos_token_ids[0] == 2
    assert ours.eos_token == "<|im_end|>"
    assert ours.vocab_size == 49152


@pytest.mark.parametrize("text", TEXTS)
def test_encoding_matches_transformers(ours: Tokenizer, reference: Any, text: str) -> None:
    assert ours.encode(text) == reference.encode(text)


@pytest.mark.parametrize("text", TEXTS)
def test_decoding_matches_transformers(ours: Tokenizer, reference: Any, text: str) -> None:
    ids = reference.encode(text)
    assert ours.decode(ids, skip_special_tokens=False) == reference.decode(ids)
    assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True)


def test_id_to_token_matches_transformers(ours: Tokenizer, reference: Any) -> None:
    for token_id in (0, 1, 2, 17, 253, 6403, 49151):
        assert ours.id_to_token(token_id) == reference.convert_ids_to_tokens(token_id)


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_renders_like_transformers(
    ours: Tokenizer, reference: Any, add_generation_prompt: bool
) -> None:
    expected = reference.apply_chat_template(
        CONVERSATION, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    got = ours.apply_chat_template(CONVERSATION, add_generation_prompt=add_generation_prompt)
    assert got == expected


def test_rendered_chat_tokenizes_like_transformers(ours: Tokenizer, reference: Any) -> None:
    expected = reference.apply_chat_template(CONVERSATION, add_generation_prompt=True)
    if isinstance(expected, dict) or hasattr(expected, "input_ids"):
        expected = expected["input_ids"]
    prompt = ours.apply_chat_template(CONVERSATION)
    assert ours.encode(prompt, add_special_tokens=False) == list(expected)


def test_default_system_prompt_is_inserted_by_the_template(ours: Tokenizer) -> None:
    prompt = ours.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_directory_holding_only_the_gguf_loads_its_vocabulary(tmp_path: Path) -> None:
    link = tmp_path / "model.gguf"
    link.symlink_to(require(SMOLLM2_GGUF))
    assert load_tokenizer(tmp_path).encode("Once upon a time") == [6403, 1980, 253, 655]
