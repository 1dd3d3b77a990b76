"""Assemble an HF `tokenizers` byte-level BPE tokenizer (GPT-2 style) from its raw parts.

Why: GGUF vocabularies, `vocab.json` + `merges.txt` directories and tiktoken rank files all
describe the same kind of tokenizer in different containers. Each layout module reads its
container into (vocabulary, merges, added tokens, pre-tokenizer); this module is the one place
that turns those parts into a working `tokenizers.Tokenizer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer


@dataclass(frozen=True)
class AddedTokenSpec:
    """A token matched verbatim in text before the model runs (a special or user token)."""

    content: str
    special: bool


def register_added_tokens(backend: HFTokenizer, added: Iterable[AddedTokenSpec]) -> None:
    """Make `added` match verbatim in input text; special ones are dropped by
    `decode(skip_special_tokens=True)`. Their ids are the vocabulary's ids for the same text."""
    specials, plain = [], []
    for spec in added:
        token = AddedToken(spec.content, special=spec.special, normalized=False)
        (specials if spec.special else plain).append(token)
    if specials:
        backend.add_special_tokens(specials)
    if plain:
        backend.add_tokens(plain)


def build_byte_level_bpe(
    vocab: dict[str, int],
    merges: Sequence[tuple[str, str]],
    pre_tokenizer: pre_tokenizers.PreTokenizer,
    *,
    added: Iterable[AddedTokenSpec] = (),
    ignore_merges: bool = False,
) -> HFTokenizer:
    """A byte-level BPE tokenizer: `vocab` maps byte-level strings (GPT-2's byte-to-unicode
    alphabet) to ids, `merges` are ranked pairs (earlier = merged first), and `pre_tokenizer`
    must end by mapping bytes to that alphabet."""
    model = models.BPE(vocab=vocab, merges=list(merges), ignore_merges=ignore_merges)
    backend = HFTokenizer(model)
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    register_added_tokens(backend, added)
    return backend
