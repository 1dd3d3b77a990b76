"""Logprobs in the two OpenAI shapes: the completions one (parallel lists of tokens,
logprobs, top-logprob dicts and text offsets) and the chat one (a list of token entries with
their bytes and top alternatives).

Why it exists: both routes, streaming or not, turn the engine's `TokenLogprobs` into these
shapes; doing it in one place keeps the token strings (each id decoded alone, specials kept)
and the handling of values JSON cannot carry (-inf for masked tokens becomes -9999.0, as in
vLLM) the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from vllm_tvm.runtime.sampling.sampler import TokenLogprobs
from vllm_tvm.runtime.tokenization import Tokenizer

MASKED_LOGPROB = -9999.0
"""What a logprob of -inf (a token that could not be sampled) is reported as."""


def finite(value: float) -> float:
    """`value` as a JSON-safe float: -inf and NaN become MASKED_LOGPROB, +inf a large value."""
    if math.isnan(value) or value == -math.inf:
        return MASKED_LOGPROB
    if value == math.inf:
        return -MASKED_LOGPROB
    return float(value)


class TokenText:
    """Each token id's text on its own (specials kept), cached per id."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        """The text of `token_id` decoded alone."""
        text = self._cache.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id], skip_special_tokens=False)
            self._cache[token_id] = text
        return text


def _top(entry: TokenLogprobs, count: int) -> list[tuple[int, float]]:
    ids = [int(t) for t in entry.top_token_ids[:count]]
    values = [float(v) for v in entry.top_logprobs[:count]]
    return list(zip(ids, values, strict=True))


def completion_logprobs(
    entries: Sequence[TokenLogprobs | None],
    token_ids: Sequence[int],
    count: int,
    token_text: TokenText,
    text_offset: int = 0,
) -> dict[str, Any]:
    """The completions `logprobs` object for `token_ids` (entries aligned with them; None
    for a token nothing predicts, the first prompt token). `top_logprobs` holds the `count`
    best tokens plus the chosen one, as in vLLM."""
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float] | None] = []
    offsets: list[int] = []
    offset = text_offset
    for token_id, entry in zip(token_ids, entries, strict=True):
        text = token_text(token_id)
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
        if entry is None:
            token_logprobs.append(None)
            top_logprobs.append(None)
            continue
        token_logprobs.append(finite(entry.logprob))
        top = {token_text(t): finite(v) for t, v in _top(entry, count)}
        top.setdefault(text, finite(entry.logprob))
        top_logprobs.append(top)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


def _chat_entry(token_id: int, logprob: float, token_text: TokenText) -> dict[str, Any]:
    text = token_text(token_id)
    return {"token": text, "logprob": finite(logprob), "bytes": list(text.encode("utf-8"))}


def chat_logprobs(
    entries: Sequence[TokenLogprobs], count: int, token_text: TokenText
) -> dict[str, Any]:
    """The chat `logprobs` object: `{"content": [...]}` with `count` top alternatives each."""
    content = []
    for entry in entries:
        item = _chat_entry(entry.token_id, entry.logprob, token_text)
        item["top_logprobs"] = [_chat_entry(t, v, token_text) for t, v in _top(entry, count)]
        content.append(item)
    return {"content": content}


def prompt_logprobs_json(
    entries: Sequence[TokenLogprobs | None] | None, token_text: TokenText
) -> list[dict[str, Any] | None] | None:
    """vLLM's `prompt_logprobs` response field: per prompt token, None for the first, else
    {token id: {"logprob", "rank", "decoded_token"}} for the token and its top alternatives."""
    if entries is None:
        return None
    result: list[dict[str, Any] | None] = []
    for entry in entries:
        if entry is None:
            result.append(None)
            continue
        item = {
            str(entry.token_id): {
                "logprob": finite(entry.logprob),
                "rank": entry.rank,
                "decoded_token": token_text(entry.token_id),
            }
        }
        for rank, (token_id, value) in enumerate(_top(entry, len(entry.top_token_ids)), 1):
            item.setdefault(
                str(token_id),
                {"logprob": finite(value), "rank": rank, "decoded_token": token_text(token_id)},
            )
        result.append(item)
    return result
