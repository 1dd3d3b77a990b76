"""The C++ tokenizer of libvllm_tvm on llama.cpp's golden vectors, one GGUF vocabulary at a time.

Each vocabulary goes the way `vllm-tvm embed` takes it: the Python runtime converts the GGUF
vocabulary to a tokenizer.json, and the C++ tokenizer (driven through the vllm-tvm-tokenize
tool, no model needed) must give llama.cpp's `.out` ids for every `.inp` text, and decode
them to what the Python tokenizer (HF tokenizers) decodes; on more texts (added tokens, marks,
punctuation of several scripts, a prompt-sized text) the ids must equal the Python tokenizer's.
Parts of a tokenizer.json the C++ side cannot run must be refused by name, never guessed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from embed_abi import TOKENIZER_TEXTS
from tokenization_material import (
    LLAMA_CPP_MODELS,
    VOCAB_TEST_SEPARATOR,
    VOCABS_WITH_VECTORS,
    read_vocab_vectors,
    require,
)

from vllm_tvm.runtime.tokenization import load_tokenizer
from vllm_tvm.runtime.tokenization.bpe_pretokenizers import GPT4O_REGEX
from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer

SUPPORTED_IN_C = VOCABS_WITH_VECTORS
MORE_TEXTS = [
    *TOKENIZER_TEXTS,
    "e\u0301t\u00e9 \u0915\u093f\u0924\u093e\u092c \u2018quoted\u2019 \uff01\uff1f\u3002",
    "$+<=>^~|` x=(a+b)*c; // [done]",
    "1234567 89,012.5 \r\n\r\n  indented\n\n\n\tTabbed   \n",
    "\ud55c\uad6d\uc5b4 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u0416\u0443\u043a \u03a9mega  ",
]
LONG_TEXT = "The quick brown fox, 12345 times;\n\t" * 600
"""A prompt-sized text: SentencePiece-style vocabularies merge it as one word."""


@pytest.fixture(scope="module")
def tokenize_tool() -> Path:
    from vllm_tvm.native_bundle.native_build import build_native

    return build_native().tokenize_tool


def _tokenizer_json(name: str, dest: Path) -> tuple[Path, Tokenizer]:
    """The tokenizer.json `vllm-tvm embed` writes for the vocabulary, and the Python tokenizer."""
    tokenizer = load_tokenizer(require(LLAMA_CPP_MODELS / f"ggml-vocab-{name}.gguf"))
    path = dest / f"{name}.json"
    path.write_text(tokenizer.backend.to_str(), encoding="utf-8")
    return path, tokenizer


def _run(tool: Path, tokenizer_json: Path, mode: str, source: Path) -> str:
    done = subprocess.run(
        [str(tool), str(tokenizer_json), mode, str(source)], capture_output=True, check=True
    )
    return done.stdout.decode("utf-8")


@pytest.mark.parametrize("name", SUPPORTED_IN_C)
def test_c_tokenizer_gives_llama_cpp_ids_and_python_decodes(
    name: str, tokenize_tool: Path, tmp_path: Path
) -> None:
    tokenizer_json, tokenizer = _tokenizer_json(name, tmp_path)
    vectors = read_vocab_vectors(LLAMA_CPP_MODELS / f"ggml-vocab-{name}.gguf")
    assert len(vectors) >= 40
    # llama.cpp's texts, then texts with added tokens etc., and one long text (Python: oracle)
    texts = [text for text, _ in vectors] + MORE_TEXTS + [LONG_TEXT]
    expected = [ids for _, ids in vectors]
    expected += [tokenizer.encode(text, add_special_tokens=False) for text in texts[len(vectors) :]]
    inputs = tmp_path / "texts.inp"
    inputs.write_text("".join(text + VOCAB_TEST_SEPARATOR for text in texts), encoding="utf-8")
    lines = _run(tokenize_tool, tokenizer_json, "encode", inputs).split("\n")
    got = [[int(token) for token in line.split()] for line in lines[: len(texts)]]
    mismatches = [
        (text, want, have)
        for text, want, have in zip(texts, expected, got, strict=True)
        if want != have
    ]
    assert mismatches == []

    ids_file = tmp_path / "ids.out"
    ids_file.write_text("".join(" ".join(map(str, ids)) + "\n" for ids in expected))
    decoded = _run(tokenize_tool, tokenizer_json, "decode", ids_file).split(VOCAB_TEST_SEPARATOR)
    assert decoded[: len(expected)] == [tokenizer.decode(ids) for ids in expected]


REFUSED_PARTS = {
    "pre_tokenizer": (
        {
            "type": "Split",
            "pattern": {"Regex": GPT4O_REGEX},
            "behavior": "Isolated",
            "invert": False,
        },
        "Split pre-tokenizer regex",
    ),
    "normalizer": ({"type": "NFKC"}, "normalizer 'NFKC' is not supported"),
    "decoder": ({"type": "WordPiece", "prefix": "##"}, "decoder 'WordPiece' is not supported"),
}


@pytest.mark.parametrize("part", sorted(REFUSED_PARTS))
def test_c_tokenizer_refuses_what_it_cannot_run_by_name(
    part: str, tokenize_tool: Path, tmp_path: Path
) -> None:
    tokenizer_json, _ = _tokenizer_json("llama-spm", tmp_path)
    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    spec[part], message = REFUSED_PARTS[part]
    tokenizer_json.write_text(json.dumps(spec), encoding="utf-8")
    text = tmp_path / "text.inp"
    text.write_text("Hello world" + VOCAB_TEST_SEPARATOR, encoding="utf-8")
    done = subprocess.run(
        [str(tokenize_tool), str(tokenizer_json), "encode", str(text)], capture_output=True
    )
    assert done.returncode == 1
    error = done.stderr.decode()
    assert "VLLM_TVM_ERR_UNSUPPORTED" in error and message in error
    assert done.stdout == b""


@pytest.mark.parametrize("prepend_scheme", ["first", "always", "never"])
@pytest.mark.parametrize("split", [False, True])
def test_c_tokenizer_runs_metaspace_files_as_hf_tokenizers_does(
    prepend_scheme: str, split: bool, tokenize_tool: Path, tmp_path: Path
) -> None:
    """SentencePiece-style files written with a Metaspace pre-tokenizer and decoder instead of
    the Prepend / Replace normalizers (HF tokenizers itself is the oracle)."""
    from tokenizers import Tokenizer as HFTokenizer

    tokenizer_json, _ = _tokenizer_json("llama-spm", tmp_path)
    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    metaspace = {"replacement": "\u2581", "prepend_scheme": prepend_scheme, "split": split}
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", **metaspace}
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Metaspace", **metaspace},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ],
    }
    tokenizer_json.write_text(json.dumps(spec), encoding="utf-8")
    oracle = HFTokenizer.from_file(str(tokenizer_json))
    texts = [*MORE_TEXTS, " leading space", "<s>Hello</s> <s> world", "a<s>b"]
    inputs = tmp_path / "texts.inp"
    inputs.write_text("".join(text + VOCAB_TEST_SEPARATOR for text in texts), encoding="utf-8")
    lines = _run(tokenize_tool, tokenizer_json, "encode", inputs).split("\n")
    expected = [oracle.encode(text, add_special_tokens=False).ids for text in texts]
    assert [[int(token) for token in line.split()] for line in lines[: len(texts)]] == expected
    ids_file = tmp_path / "ids.out"
    ids_file.write_text("".join(" ".join(map(str, ids)) + "\n" for ids in expected))
    decoded = _run(tokenize_tool, tokenizer_json, "decode", ids_file).split(VOCAB_TEST_SEPARATOR)
    assert decoded[: len(texts)] == [oracle.decode(ids) for ids in expected]
