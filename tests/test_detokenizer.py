"""IncrementalDetokenizer: streamed deltas must add up to what a full decode gives, for
byte-level BPE, Llama-style SentencePiece BPE and Metaspace Unigram tokenizers (trained here)
and for real checkpoint tokenizers when tests/data/fetch_tokenizer_material.sh has run.
The oracle is the `tokenizers` library's own full-sequence decode."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from detokenizer_fixtures import (
    NON_SPECIAL_ADDED,
    REAL_TEXTS,
    byte_level_bpe,
    llama_style_bpe,
    metaspace_unigram,
    real_tokenizer_files,
)

from vllm_tvm.runtime.tokenization.detokenizer import DecodeTables, IncrementalDetokenizer
from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer, load_tokenizer

BUILDERS: dict[str, Callable[[], Tokenizer]] = {
    "byte_level_bpe": byte_level_bpe,
    "llama_style_bpe": llama_style_bpe,
    "metaspace_unigram": metaspace_unigram,
}
_CACHE: dict[str, Tokenizer] = {}


def _tokenizer(name: str) -> Tokenizer:
    if name not in _CACHE:
        _CACHE[name] = BUILDERS[name]() if name in BUILDERS else load_tokenizer(name)
    return _CACHE[name]


TOKENIZERS = [*BUILDERS, *(str(p) for p in real_tokenizer_files())]


def stream(detok: IncrementalDetokenizer, ids: list[int]) -> list[str]:
    """Deltas of feeding `ids` one at a time, with the final flush as the last delta."""
    return [detok.add(i) for i in ids] + [detok.flush()]


def interesting_ids(tok: Tokenizer) -> list[int]:
    """Ids that stress the decoder: pieces of real multi-byte text, specials, byte pieces,
    lone spaces."""
    tables = DecodeTables.from_tokenizer(tok)
    ids = {i for text in REAL_TEXTS for i in tok.encode(text, add_special_tokens=False)}
    ids |= tables.special_ids | tables.byte_piece_ids
    for piece in ("▁", "Ġ", "<0x20>", NON_SPECIAL_ADDED):
        if (token_id := tok.backend.token_to_id(piece)) is not None:
            ids.add(token_id)
    return sorted(ids)


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_deltas_of_random_ids_concatenate_to_full_decode(
    name: str, skip_special_tokens: bool
) -> None:
    tok = _tokenizer(name)
    tables = DecodeTables.from_tokenizer(tok)
    pool = interesting_ids(tok)
    rng = random.Random(1234)
    for _ in range(300):
        ids = [
            rng.choice(pool) if rng.random() < 0.8 else rng.randrange(tok.vocab_size)
            for _ in range(rng.randint(0, 30))
        ]
        detok = IncrementalDetokenizer(tok, skip_special_tokens=skip_special_tokens, tables=tables)
        out, pos = "", 0
        while pos < len(ids):
            size = rng.randint(1, 3)
            out += detok.extend(ids[pos : pos + size])
            pos += size
        out += detok.flush()
        assert out == tok.decode(ids, skip_special_tokens=skip_special_tokens), ids


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("text", REAL_TEXTS)
def test_real_text_streams_exactly_without_replacement_chars(name: str, text: str) -> None:
    tok = _tokenizer(name)
    ids = tok.encode(text, add_special_tokens=False)
    deltas = stream(IncrementalDetokenizer(tok), ids)
    assert "".join(deltas) == tok.decode(ids)
    assert not any("\ufffd" in d for d in deltas)


def test_byte_level_character_split_over_tokens_waits_until_complete() -> None:
    tok = _tokenizer("byte_level_bpe")
    ids = tok.encode("🎉", add_special_tokens=False)
    assert len(ids) > 1, "the test needs the emoji to span several tokens"
    deltas = stream(IncrementalDetokenizer(tok), ids)
    assert deltas[:-2] == [""] * (len(ids) - 1)
    assert deltas[-2] == "🎉"


def test_byte_fallback_character_split_over_tokens_waits_until_complete() -> None:
    tok = _tokenizer("llama_style_bpe")
    pieces = [tok.backend.token_to_id(f"<0x{b:02X}>") for b in "中".encode()]
    space = tok.backend.token_to_id("▁")
    deltas = stream(IncrementalDetokenizer(tok), [*pieces, space])
    assert deltas[:3] == ["", "", ""]
    assert "".join(deltas) == "中 "


def test_flush_shows_an_unfinished_character_as_a_full_decode_does() -> None:
    tok = _tokenizer("byte_level_bpe")
    ids = tok.encode("a🎉", add_special_tokens=False)[:-1]
    deltas = stream(IncrementalDetokenizer(tok), ids)
    assert "".join(deltas[:-1]) == "a"
    assert deltas[-1] == tok.decode(ids)[1:]
    assert deltas[-1].endswith("\ufffd")


@pytest.mark.parametrize("name", ["llama_style_bpe", "metaspace_unigram"])
def test_sentencepiece_spaces_are_neither_lost_nor_added(name: str) -> None:
    tok = _tokenizer(name)
    ids = tok.encode("Hello world and the lazy dog", add_special_tokens=False)
    deltas = stream(IncrementalDetokenizer(tok), ids)
    assert "".join(deltas) == "Hello world and the lazy dog"


@pytest.mark.parametrize("name", ["llama_style_bpe", "metaspace_unigram"])
def test_prompt_context_gives_first_output_token_its_leading_space(name: str) -> None:
    tok = _tokenizer(name)
    prompt = tok.encode("Hello", add_special_tokens=False)
    output = tok.encode("Hello world", add_special_tokens=False)[len(prompt) :]
    assert "".join(stream(IncrementalDetokenizer(tok), output)) == "world"
    with_prompt = IncrementalDetokenizer(tok, prompt_token_ids=prompt)
    assert "".join(stream(with_prompt, output)) == " world"


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("text", REAL_TEXTS)
def test_output_after_prompt_is_the_full_decode_minus_the_prompt_text(name: str, text: str) -> None:
    tok = _tokenizer(name)
    full = tok.encode(text, add_special_tokens=False)
    for cut in range(1, len(full)):
        prompt, output = full[:cut], full[cut:]
        whole, head = tok.decode(full), tok.decode(prompt)
        if "\ufffd" in head or not whole.startswith(head):
            continue  # the cut splits a character: no text boundary to compare against
        deltas = stream(IncrementalDetokenizer(tok, prompt_token_ids=prompt), output)
        assert "".join(deltas) == whole[len(head) :], cut


@pytest.mark.parametrize("name", [*BUILDERS])
def test_special_tokens_are_skipped_only_when_asked(name: str) -> None:
    tok = _tokenizer(name)
    eos = tok.eos_token_ids[0]
    ids = [*tok.encode("Hello", add_special_tokens=False), eos]
    skipped = "".join(stream(IncrementalDetokenizer(tok, skip_special_tokens=True), ids))
    kept = "".join(stream(IncrementalDetokenizer(tok, skip_special_tokens=False), ids))
    assert skipped == "Hello"
    assert kept == tok.decode(ids, skip_special_tokens=False)
    assert kept.endswith("</s>")


@pytest.mark.parametrize("name", [*BUILDERS])
def test_non_special_added_token_is_text_even_when_skipping_specials(name: str) -> None:
    tok = _tokenizer(name)
    ids = tok.encode(f"Hello {NON_SPECIAL_ADDED} world", add_special_tokens=False)
    text = "".join(stream(IncrementalDetokenizer(tok, skip_special_tokens=True), ids))
    assert NON_SPECIAL_ADDED in text
    assert text == tok.decode(ids, skip_special_tokens=True)


class _RecordingBackend:
    """Delegates to a real tokenizers.Tokenizer and records how many ids each decode saw."""

    def __init__(self, backend: object) -> None:
        self._backend = backend
        self.decode_lengths: list[int] = []

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        self.decode_lengths.append(len(ids))
        return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def __getattr__(self, name: str) -> object:
        return getattr(self._backend, name)


LONG_TEXTS = {
    "mixed corpus": " ".join(REAL_TEXTS * 10),
    "one unbroken run of byte-fallback characters": "龘靐齉" * 100,
}


@pytest.mark.parametrize("name", [*BUILDERS])
@pytest.mark.parametrize("text", LONG_TEXTS.values(), ids=LONG_TEXTS.keys())
def test_each_step_decodes_a_short_window_not_the_whole_output(name: str, text: str) -> None:
    tok = _tokenizer(name)
    recording = _RecordingBackend(tok.backend)
    watched = Tokenizer(backend=recording)  # type: ignore[arg-type]
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) > 300
    deltas = stream(IncrementalDetokenizer(watched), ids)
    assert "".join(deltas) == tok.decode(ids)
    # Bounded by the longest run of ids without a text boundary (a few characters, or the
    # long-byte-run limit), never by the length of the output.
    assert max(recording.decode_lengths) <= 40


def test_feeding_ids_after_flush_is_an_error() -> None:
    detok = IncrementalDetokenizer(_tokenizer("byte_level_bpe"))
    detok.flush()
    with pytest.raises(RuntimeError, match="after flush"):
        detok.add(5)


def test_decode_tables_find_specials_and_byte_pieces() -> None:
    byte_level = DecodeTables.from_tokenizer(_tokenizer("byte_level_bpe"))
    llama = _tokenizer("llama_style_bpe")
    fallback = DecodeTables.from_tokenizer(llama)
    assert byte_level.byte_piece_ids == frozenset()
    assert len(fallback.byte_piece_ids) == 256
    assert llama.backend.token_to_id("<0xE4>") in fallback.byte_piece_ids
    assert fallback.special_ids == {llama.backend.token_to_id(t) for t in ("<unk>", "<s>", "</s>")}


def test_long_byte_fallback_run_streams_before_it_ends() -> None:
    tok = _tokenizer("llama_style_bpe")
    ids = tok.encode("龘靐齉" * 10, add_special_tokens=False)
    assert all(tok.id_to_token(i).startswith("<0x") for i in ids[1:])
    deltas = stream(IncrementalDetokenizer(tok), ids)
    assert "".join(deltas[:-1]) != ""
    assert "".join(deltas) == "龘靐齉" * 10
