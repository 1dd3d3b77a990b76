"""Load a byte-level BPE tokenizer stored as `vocab.json` + `merges.txt` (GPT-2's layout).

Why: older checkpoints (GPT-2, GPT-J, CodeGen, RoBERTa-style, some Qwen2 uploads) come
without `tokenizer.json`. The two files give the vocabulary and ranked merges; the word
splitting regex is implied by the HF tokenizer class named in `tokenizer_config.json`, so the
class is mapped to a pre-tokenizer family and unknown classes are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.runtime.tokenization.bpe_pretokenizers import pre_tokenizer_spec
from vllm_tvm.runtime.tokenization.byte_level_bpe import AddedTokenSpec, build_byte_level_bpe

# HF tokenizer class -> `tokenizer.ggml.pre` family whose regex that class uses.
_CLASS_FAMILIES = {
    "GPT2Tokenizer": "gpt-2",
    "GPT2TokenizerFast": "gpt-2",
    "CodeGenTokenizer": "gpt-2",
    "CodeGenTokenizerFast": "gpt-2",
    "GPTNeoXTokenizerFast": "gpt-2",
    "Qwen2Tokenizer": "qwen2",
    "Qwen2TokenizerFast": "qwen2",
}
SUPPORTED_TOKENIZER_CLASSES = tuple(sorted(_CLASS_FAMILIES))


def read_merges(path: Path) -> list[tuple[str, str]]:
    """The ranked pairs of a `merges.txt` (an optional `#version` header line, then one
    space-separated pair per line)."""
    merges = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#version"):
            continue
        left, sep, right = line.partition(" ")
        if not sep:
            raise ValueError(f"{path}: malformed merge line {line!r}; expected 'left right'")
        merges.append((left, right))
    return merges


def load_bpe_files(
    model_dir: Path, tokenizer_class: str | None, added: dict[int, AddedTokenSpec]
) -> HFTokenizer:
    """The tokenizer of `model_dir/vocab.json` + `model_dir/merges.txt`.

    `tokenizer_class` (from tokenizer_config.json; None means GPT-2) picks the pre-tokenizer;
    `added` maps ids to the added tokens declared beside the files, which join the
    vocabulary at those ids. Raises `ValueError` for a tokenizer class it has no regex for.
    """
    family = _CLASS_FAMILIES.get(tokenizer_class or "GPT2Tokenizer")
    if family is None:
        raise ValueError(
            f"unsupported tokenizer_class {tokenizer_class!r} for vocab.json + merges.txt; "
            f"supported: {', '.join(SUPPORTED_TOKENIZER_CLASSES)}"
        )
    vocab: dict[str, int] = json.loads((model_dir / "vocab.json").read_text(encoding="utf-8"))
    for token_id, spec in added.items():
        vocab.setdefault(spec.content, token_id)
    spec = pre_tokenizer_spec(family)
    return build_byte_level_bpe(
        vocab,
        read_merges(model_dir / "merges.txt"),
        spec.build(),
        added=added.values(),
        ignore_merges=spec.ignore_merges,
    )
