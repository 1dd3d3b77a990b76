"""Assemble an HF `tokenizers` tokenizer that behaves like a SentencePiece BPE model.

Why: Llama-2/Mistral-style vocabularies come as SentencePiece pieces with scores (in a
`tokenizer.model` protobuf or in GGUF metadata with `tokenizer.ggml.model = "llama"`), not as
a merge list. SentencePiece BPE repeatedly merges the adjacent pair whose joined piece has the
highest score, so ranking every (left, right) split of each piece by that piece's score gives
an equivalent HF BPE merge list. Spaces become "▁" (with one prepended to the text when the
model adds a dummy prefix), and characters outside the vocabulary fall back to `<0xNN>` byte
pieces when the model has them. Gemma-4-style vocabularies use the same "▁" scheme but ship
their merges, so they skip the score ranking (`build_merged_sentencepiece_bpe`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum

from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from vllm_tvm.runtime.tokenization.bpe_merges import merges_from_priority
from vllm_tvm.runtime.tokenization.byte_level_bpe import AddedTokenSpec, register_added_tokens

SPACE_MARK = "▁"


class PieceType(IntEnum):
    """SentencePiece piece types; GGUF `tokenizer.ggml.token_type` uses the same numbers."""

    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


def _merge_list(
    pieces: Sequence[str], scores: Sequence[float], types: Sequence[int], vocab: dict[str, int]
) -> list[tuple[str, str]]:
    """Merges that form normal and user-defined pieces, highest score first."""
    mergeable = [
        i for i, kind in enumerate(types) if kind in (PieceType.NORMAL, PieceType.USER_DEFINED)
    ]
    mergeable.sort(key=lambda i: (-scores[i], i))
    return merges_from_priority((pieces[i] for i in mergeable), vocab)


def _with_added(
    pieces: Sequence[str],
    scores: Sequence[float],
    types: Sequence[int],
    added: Mapping[int, AddedTokenSpec],
) -> tuple[list[str], list[float], list[int]]:
    pieces, scores, types = list(pieces), list(scores), list(types)
    for token_id in sorted(added):
        spec = added[token_id]
        kind = PieceType.CONTROL if spec.special else PieceType.USER_DEFINED
        if token_id < len(pieces):
            if pieces[token_id] != spec.content:
                raise ValueError(
                    f"added token {spec.content!r} claims id {token_id}, which is the piece "
                    f"{pieces[token_id]!r}"
                )
            if types[token_id] not in (PieceType.CONTROL, PieceType.UNKNOWN):
                types[token_id] = kind
        elif token_id == len(pieces):
            pieces.append(spec.content)
            scores.append(0.0)
            types.append(kind)
        else:
            raise ValueError(
                f"added token {spec.content!r} has id {token_id}, leaving a gap after the "
                f"{len(pieces)} pieces; expected ids to continue from {len(pieces)}"
            )
    return pieces, scores, types


def build_sentencepiece_bpe(
    pieces: Sequence[str],
    scores: Sequence[float],
    types: Sequence[int],
    *,
    add_dummy_prefix: bool = True,
    precompiled_charsmap: bytes = b"",
    unk_id: int | None = None,
    added: Mapping[int, AddedTokenSpec] | None = None,
) -> HFTokenizer:
    """An HF tokenizer equivalent to the SentencePiece BPE model given by `pieces` (the id is
    the index), their `scores` (higher merges first) and `types` (`PieceType` values).

    Control and unknown pieces become special added tokens, user-defined pieces plain added
    tokens (matched verbatim in text, as SentencePiece does). A non-empty
    `precompiled_charsmap` (SentencePiece's compiled normalization rules, e.g. NFKC) is
    applied to the text first. `added` (id -> token, from HF
    configs) re-types existing pieces or appends new ones right after the last piece.
    """
    if not len(pieces) == len(scores) == len(types):
        raise ValueError(
            f"pieces, scores and types differ in length: {len(pieces)}, {len(scores)}, {len(types)}"
        )
    if added:
        pieces, scores, types = _with_added(pieces, scores, types, added)
    vocab = _vocab(pieces)
    return _assemble(
        pieces,
        types,
        vocab,
        _merge_list(pieces, scores, types, vocab),
        add_dummy_prefix=add_dummy_prefix,
        precompiled_charsmap=precompiled_charsmap,
        unk_id=unk_id,
    )


def build_merged_sentencepiece_bpe(
    pieces: Sequence[str],
    types: Sequence[int],
    merges: Sequence[tuple[str, str]],
    *,
    unk_id: int | None = None,
) -> HFTokenizer:
    """An HF tokenizer for a "▁"-spaced BPE vocabulary that ships its own ranked `merges`
    (GGUF `tokenizer.ggml.model = "gemma4"`): spaces become "▁" without a dummy prefix, the
    text is cut only at runs of newlines, and unknown characters fall back to byte pieces."""
    if len(pieces) != len(types):
        raise ValueError(f"pieces and types differ in length: {len(pieces)}, {len(types)}")
    backend = _assemble(
        pieces, types, _vocab(pieces), merges, add_dummy_prefix=False, unk_id=unk_id
    )
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("[^\n]+|[\n]+"), behavior="isolated")
    return backend


def _vocab(pieces: Sequence[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for token_id, piece in enumerate(pieces):
        vocab.setdefault(piece, token_id)
    return vocab


def _assemble(
    pieces: Sequence[str],
    types: Sequence[int],
    vocab: dict[str, int],
    merges: Sequence[tuple[str, str]],
    *,
    add_dummy_prefix: bool,
    precompiled_charsmap: bytes = b"",
    unk_id: int | None = None,
) -> HFTokenizer:
    """BPE model, "▁" normalizer and decoder, and added tokens of a SentencePiece-style
    vocabulary."""
    byte_fallback = any(kind == PieceType.BYTE for kind in types)
    if unk_id is None:
        unk_id = next((i for i, kind in enumerate(types) if kind == PieceType.UNKNOWN), None)
    model = models.BPE(
        vocab=vocab,
        merges=list(merges),
        unk_token=pieces[unk_id] if unk_id is not None else None,
        fuse_unk=True,
        byte_fallback=byte_fallback,
    )
    backend = HFTokenizer(model)
    steps: list[normalizers.Normalizer] = []
    if precompiled_charsmap:
        steps.append(normalizers.Precompiled(precompiled_charsmap))
    if add_dummy_prefix:
        steps.append(normalizers.Prepend(SPACE_MARK))
    steps.append(normalizers.Replace(" ", SPACE_MARK))
    backend.normalizer = normalizers.Sequence(steps)
    decode_steps: list[decoders.Decoder] = [decoders.Replace(SPACE_MARK, " ")]
    if byte_fallback:
        decode_steps.append(decoders.ByteFallback())
    decode_steps.append(decoders.Fuse())
    if add_dummy_prefix:
        decode_steps.append(decoders.Strip(content=" ", left=1, right=0))
    backend.decoder = decoders.Sequence(decode_steps)
    special_kinds = (PieceType.CONTROL, PieceType.UNKNOWN)
    register_added_tokens(
        backend,
        [
            AddedTokenSpec(pieces[i], special=kind in special_kinds)
            for i, kind in enumerate(types)
            if kind in (*special_kinds, PieceType.USER_DEFINED) and vocab.get(pieces[i]) == i
        ],
    )
    return backend
