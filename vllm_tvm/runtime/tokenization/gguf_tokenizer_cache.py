"""A GGUF file's tokenizer kept as `tokenizer.json` plus its special-token facts, so a start
loads it in milliseconds instead of building it from the file's metadata.

Why: building it means decoding tens of thousands of vocabulary strings and merges from the
GGUF metadata and handing them to `tokenizers` (about half a second per start for a 49k
vocabulary); loading the same tokenizer from its JSON form is a fraction of that. The entry
is keyed by the file and by the version of the code that builds it (artifacts/
derived_cache.py), so a changed file or builder builds anew; an entry that does not load is
rebuilt, never used.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.artifacts.derived_cache import code_version, read_entry, write_entry
from vllm_tvm.checkpoints import gguf_file
from vllm_tvm.runtime.tokenization import (
    bpe_pretokenizers,
    byte_level_bpe,
    gguf_vocab,
    sentencepiece_bpe,
    tokenizer,
)
from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer

KIND = "gguf-tokenizer"
BACKEND_FILE = "tokenizer.json"
FACTS_FILE = "special_tokens.json"
_BUILDERS = (gguf_file, gguf_vocab, byte_level_bpe, sentencepiece_bpe, bpe_pretokenizers, tokenizer)


def builder_version() -> str:
    """The version of the code that builds a GGUF tokenizer (part of the cache key)."""
    return code_version(
        [module.__file__ or "" for module in _BUILDERS], f"tokenizers {tokenizers.__version__}"
    )


def load_cached_gguf_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of the GGUF file at `path`, from the cache when a valid entry is there,
    else built from the file (`gguf_vocab.load_gguf_tokenizer`) and stored."""
    path = Path(path)
    version = builder_version()
    entry = read_entry(KIND, path, version)
    if entry is not None:
        cached = _read(entry)
        if cached is not None:
            return cached
    built = gguf_vocab.load_gguf_tokenizer(path)
    write_entry(KIND, path, version, lambda directory: _write(built, directory))
    return built


def _facts(tok: Tokenizer) -> dict[str, object]:
    return {
        field.name: getattr(tok, field.name)
        for field in dataclasses.fields(tok)
        if field.name != "backend"
    }


def _write(tok: Tokenizer, directory: Path) -> None:
    (directory / BACKEND_FILE).write_text(tok.backend.to_str(), encoding="utf-8")
    (directory / FACTS_FILE).write_text(json.dumps(_facts(tok)), encoding="utf-8")


def _read(directory: Path) -> Tokenizer | None:
    try:
        facts = json.loads((directory / FACTS_FILE).read_text(encoding="utf-8"))
        backend = HFTokenizer.from_str((directory / BACKEND_FILE).read_text(encoding="utf-8"))
        return Tokenizer(backend=backend, **facts)
    except Exception:  # OSError, bad JSON, wrong fields; `tokenizers` raises bare Exception
        return None
