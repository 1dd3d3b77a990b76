"""Build the runtime's tokenizer from the vocabulary stored in a GGUF file's metadata.

Why: a GGUF checkpoint has no `tokenizer.json`; its tokenizer lives in `tokenizer.ggml.*`
keys. Two tokenizer models cover the GGUF files the runtime serves:
- "gpt2": byte-level BPE with a merge list; the pre-tokenizer is only named
  (`tokenizer.ggml.pre`) and looked up in `bpe_pretokenizers`.
- "llama": SentencePiece BPE with scores, byte fallback and "▁" for spaces.
- "gemma4": "▁"-spaced BPE with its own merge list and byte fallback.
Other models (bert, t5, rwkv, ...) are refused by name rather than approximated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.checkpoints.gguf_file import read_gguf_metadata
from vllm_tvm.runtime.tokenization.bpe_pretokenizers import pre_tokenizer_spec
from vllm_tvm.runtime.tokenization.byte_level_bpe import AddedTokenSpec, build_byte_level_bpe
from vllm_tvm.runtime.tokenization.sentencepiece_bpe import (
    PieceType,
    build_merged_sentencepiece_bpe,
    build_sentencepiece_bpe,
)
from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer

SUPPORTED_GGUF_MODELS = ("gemma4", "gpt2", "llama")

# Control tokens that end a turn in chat models; generation stops on them like on EOS.
END_OF_TURN_TOKENS = frozenset(
    {
        "<|eot_id|>",
        "<|eom_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<EOT>",
        "<|return|>",
        "<|call|>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek,
    }
)


def _token_id(meta: dict[str, Any], key: str, n_tokens: int) -> int | None:
    value = meta.get(f"tokenizer.ggml.{key}_token_id")
    if isinstance(value, int) and 0 <= value < n_tokens:
        return value
    return None


def _end_of_generation_ids(meta: dict[str, Any], tokens: list[str], types: list[int]) -> list[int]:
    """EOS first, then the declared end-of-turn ids, then control tokens named like one."""
    ids: list[int] = []
    for key in ("eos", "eot", "eom"):
        token_id = _token_id(meta, key, len(tokens))
        if token_id is not None and token_id not in ids:
            ids.append(token_id)
    for token_id, (text, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind == PieceType.CONTROL and text in END_OF_TURN_TOKENS and token_id not in ids:
            ids.append(token_id)
    return ids


def _byte_level_backend(
    meta: dict[str, Any], tokens: list[str], types: list[int]
) -> tuple[HFTokenizer, bool]:
    """The byte-level BPE backend and llama.cpp's default for adding BOS in its family."""
    spec = pre_tokenizer_spec(meta.get("tokenizer.ggml.pre"))
    vocab: dict[str, int] = {}
    for token_id, text in enumerate(tokens):
        vocab.setdefault(text, token_id)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    added = [
        AddedTokenSpec(text, special=kind in (PieceType.CONTROL, PieceType.UNKNOWN))
        for token_id, (text, kind) in enumerate(zip(tokens, types, strict=True))
        if kind in (PieceType.CONTROL, PieceType.UNKNOWN, PieceType.USER_DEFINED)
        and vocab[text] == token_id
    ]
    backend = build_byte_level_bpe(
        vocab, merges, spec.build(), added=added, ignore_merges=spec.ignore_merges
    )
    return backend, spec.add_bos


def load_gguf_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer stored in the metadata of the GGUF file at `path`.

    Raises `ValueError` for a tokenizer model or pre-tokenizer name it does not support,
    naming the value and listing the accepted ones.
    """
    meta = read_gguf_metadata(path)
    model = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if model not in SUPPORTED_GGUF_MODELS:
        raise ValueError(
            f"{path}: unsupported GGUF tokenizer.ggml.model {model!r}; "
            f"supported: {', '.join(SUPPORTED_GGUF_MODELS)}"
        )
    if not tokens:
        raise ValueError(f"{path}: GGUF file has no tokenizer.ggml.tokens")
    types = list(meta.get("tokenizer.ggml.token_type") or [PieceType.NORMAL] * len(tokens))
    if len(types) != len(tokens):
        raise ValueError(
            f"{path}: {len(tokens)} tokens but {len(types)} token types; expected one per token"
        )
    if model == "gpt2":
        backend, default_add_bos = _byte_level_backend(meta, tokens, types)
    elif model == "gemma4":
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
        backend = build_merged_sentencepiece_bpe(
            tokens, types, merges, unk_id=_token_id(meta, "unknown", len(tokens))
        )
        default_add_bos = True  # llama.cpp forces BOS for this family
    else:
        scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
        backend = build_sentencepiece_bpe(
            tokens,
            scores,
            types,
            add_dummy_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix", True)),
            unk_id=_token_id(meta, "unknown", len(tokens)),
        )
        default_add_bos = True
    bos_id = _token_id(meta, "bos", len(tokens))
    eos_ids = _end_of_generation_ids(meta, tokens, types)
    template = meta.get("tokenizer.chat_template")
    named = {
        key.removeprefix("tokenizer.chat_template."): value
        for key, value in meta.items()
        if key.startswith("tokenizer.chat_template.") and isinstance(value, str)
    }
    return Tokenizer(
        backend=backend,
        bos_token_id=bos_id,
        eos_token_ids=eos_ids,
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", default_add_bos)),
        chat_template=template if isinstance(template, str) else None,
        bos_token=tokens[bos_id] if bos_id is not None else None,
        eos_token=tokens[eos_ids[0]] if eos_ids else None,
        named_chat_templates=named,
    )
