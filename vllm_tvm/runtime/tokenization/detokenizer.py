"""Incremental detokenization: turn a request's sampled ids into text deltas, one step at a
time, without ever emitting text that a later token would change.

Why not decode token by token: a token is not a unit of text. Byte-level BPE tokens can hold
half of a UTF-8 character; SentencePiece decoders drop the leading space of whatever token
comes first in the list they are given; byte-fallback decoders turn a whole run of `<0xXX>`
tokens into text at once. Why not re-decode everything each step: that is O(length) per
step, O(length^2) per request.

The technique: keep a short window of ids that starts one emission back (the "prefix"). The
prefix's text is known; decoding prefix + new ids and cutting off the prefix's text gives the
new text with the context the decoder needs (the space-stripping and byte-joining see the
same neighbours they see in a full decode). The window only moves forward at a stable
boundary: the text does not end in U+FFFD (a character still incomplete) and, for
byte-fallback decoders, the last id is not a `<0xXX>` piece (a later orphan byte turns the
whole run into replacement characters) unless the run is already long (`_LONG_BYTE_RUN`).
`flush()` releases whatever is held when the request ends, so the concatenated deltas equal
`tokenizer.decode(all ids)`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vllm_tvm.runtime.tokenization.tokenizer import Tokenizer

REPLACEMENT_CHAR = "\ufffd"

# How many prompt ids may prime the window (enough for the decoder to see the context of
# the first output token: a preceding space, the rest of a character).
_MIN_PROMPT_CONTEXT = 4
_MAX_PROMPT_CONTEXT = 24

# A run of `<0xXX>` pieces this long is released as soon as its text is complete instead of
# being held to its end, so a long run of byte-fallback characters costs O(window) per step.
# The price, only for invalid UTF-8: if such a run later ends in an orphan byte, a full
# decode turns the whole run into U+FFFD (HF ByteFallback is all-or-nothing) while the
# stream already showed its valid characters (which is what SentencePiece itself shows).
_LONG_BYTE_RUN = 16


@dataclass(frozen=True)
class DecodeTables:
    """Per-tokenizer facts the detokenizer needs; build once, share across requests."""

    special_ids: frozenset[int]
    byte_piece_ids: frozenset[int]

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> DecodeTables:
        """Read the special ids and, when the decoder has a ByteFallback step, the ids of the
        `<0xXX>` pieces it converts."""
        backend = tokenizer.backend
        special = frozenset(
            token_id
            for token_id, added in backend.get_added_tokens_decoder().items()
            if added.special
        )
        byte_pieces: frozenset[int] = frozenset()
        if backend.decoder is not None and _has_byte_fallback(
            json.loads(backend.decoder.__getstate__())
        ):
            found = (backend.token_to_id(f"<0x{byte:02X}>") for byte in range(256))
            byte_pieces = frozenset(token_id for token_id in found if token_id is not None)
        return cls(special_ids=special, byte_piece_ids=byte_pieces)


def _has_byte_fallback(decoder: dict) -> bool:
    if decoder.get("type") == "ByteFallback":
        return True
    return any(_has_byte_fallback(child) for child in decoder.get("decoders", []))


def _common_prefix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class IncrementalDetokenizer:
    """Per-request incremental decoder: `add`/`extend` ids, get the newly stable text."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        skip_special_tokens: bool = True,
        prompt_token_ids: Sequence[int] = (),
        tables: DecodeTables | None = None,
    ) -> None:
        """`prompt_token_ids` give the first output token its left context (so a
        SentencePiece "▁world" after the prompt "Hello" yields " world", as in vLLM); with no
        prompt the output is decoded as a sequence of its own. Pass `tables` built once per
        tokenizer to avoid recomputing them per request."""
        self._backend = tokenizer.backend
        self._skip_special_tokens = skip_special_tokens
        tables = tables or DecodeTables.from_tokenizer(tokenizer)
        self._dropped_ids = tables.special_ids if skip_special_tokens else frozenset()
        self._byte_piece_ids = tables.byte_piece_ids
        self._finished = False
        # ids from the prefix start onward; ids[:_read] is the prefix, already emitted.
        self._window: list[int] = self._prompt_context(prompt_token_ids)
        self._read = len(self._window)
        self._prefix_text = self._decode(self._window)

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self._backend.decode(ids, skip_special_tokens=self._skip_special_tokens)

    def _prompt_context(self, prompt_token_ids: Sequence[int]) -> list[int]:
        """The shortest prompt tail (of at least a few ids) whose text is clean: it starts
        and ends on character boundaries, so it is a valid place to cut."""
        recent = prompt_token_ids[-4 * _MAX_PROMPT_CONTEXT :]
        kept = [i for i in recent if i not in self._dropped_ids]
        if len(kept) <= _MIN_PROMPT_CONTEXT:
            return kept
        for size in range(_MIN_PROMPT_CONTEXT, min(len(kept), _MAX_PROMPT_CONTEXT) + 1):
            if REPLACEMENT_CHAR not in self._decode(kept[-size:]):
                return kept[-size:]
        return kept[-_MIN_PROMPT_CONTEXT:]

    def add(self, token_id: int) -> str:
        """Append one sampled id; return the text that became stable (often "")."""
        return self.extend((token_id,))

    def extend(self, token_ids: Iterable[int]) -> str:
        """Append several sampled ids at once (one decode); return the newly stable text."""
        if self._finished:
            raise RuntimeError("IncrementalDetokenizer.extend() called after flush()")
        before = len(self._window)
        self._window.extend(i for i in token_ids if i not in self._dropped_ids)
        if len(self._window) == before:
            return ""
        return self._advance(final=False)

    def flush(self) -> str:
        """End of the request: return all text still held back (an incomplete character
        comes out as U+FFFD, exactly as a full decode shows it). No ids may follow."""
        if self._finished:
            return ""
        delta = self._advance(final=True)
        self._finished = True
        return delta

    def _advance(self, *, final: bool) -> str:
        text = self._decode(self._window)
        if not final and not self._is_stable(text):
            return ""
        prefix = self._prefix_text
        cut = len(prefix) if text.startswith(prefix) else _common_prefix_len(prefix, text)
        delta = text[cut:]
        # The ids just emitted become the next prefix.
        self._window = self._window[self._read :]
        self._read = len(self._window)
        self._prefix_text = "" if final else self._decode(self._window)
        return delta

    def _is_stable(self, text: str) -> bool:
        """Whether the window ends on a boundary no later id can change."""
        if len(text) <= len(self._prefix_text) or text.endswith(REPLACEMENT_CHAR):
            return False
        trailing_pieces = 0
        for token_id in reversed(self._window):
            if token_id not in self._byte_piece_ids or trailing_pieces == _LONG_BYTE_RUN:
                break
            trailing_pieces += 1
        return trailing_pieces in (0, _LONG_BYTE_RUN)
