"""What a request asks of the sampler and the stop checks, with vLLM's field names and defaults.

Why it exists: `SamplingParams` is the one object a user of the Python API, the OpenAI server
and the engine all pass around. Keeping vLLM's names, defaults and validation messages lets
code written against vLLM run unchanged, and validating once here lets the sampler trust it.

Deliberate differences from vLLM: `max_tokens <= 0` means unset (clients send -1 for "no
limit") instead of an error, as the OpenAI server also reads it (the reference server's rule;
`vllm-tvm generate --max-tokens` still refuses it with vLLM's message through
`check_requested_max_tokens`); `best_of` is accepted only as a
no-op (unset or equal to `n`); `logprobs=False` means no logprobs; temperatures in (0, 1e-2)
are used as given, not raised to 1e-2, and temperature has no upper bound (the newest vLLM
refuses above 2).

The engine-level choice of which logits the returned logprobs describe is `LogprobsMode`
(passed to the `Sampler`, not per request), defined here beside the fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

SAMPLING_EPS = 1e-5
"""A temperature below this samples greedily (vLLM's `_SAMPLING_EPS`)."""

SHOWN_TOKEN_IDS = 8
"""How many offending token ids an error message lists (the rest are counted)."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The range of every integer parameter: they are packed into int64 arrays (the device
sampler's top_k, the host sampler's token ids), and vLLM bounds `seed` to it."""


def check_requested_max_tokens(max_tokens: int | None) -> None:
    """vLLM's refusal of a requested `max_tokens` below 1 (None: unset, accepted)."""
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")


LogprobsMode = Literal["raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits"]
LOGPROBS_MODES: tuple[str, ...] = get_args(LogprobsMode)


def check_logprobs_mode(mode: str) -> LogprobsMode:
    """Return `mode` if it is one of vLLM's four logprobs modes, else raise ValueError.

    raw_* modes read the logits before any processing (the model's distribution);
    processed_* modes read them after temperature, min-p, top-k and top-p (the distribution
    actually sampled from, masked tokens at -inf).
    """
    if mode not in LOGPROBS_MODES:
        supported = ", ".join(LOGPROBS_MODES)
        raise ValueError(f"unsupported logprobs_mode {mode!r}; supported: {supported}")
    return mode  # type: ignore[return-value]


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}.")
    return float(value)


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    _check_int64(name, value)
    return value


def _check_int64(name: str, value: int) -> None:
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(
            f"{name} must be within the signed 64-bit range [{INT64_MIN}, {INT64_MAX}], "
            f"got {value}."
        )


def _token_ids(name: str, values: object) -> list[int]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a list of token ids, got {values!r}.")
    ids = list(values)  # type: ignore[call-overload]
    bad = [v for v in ids if isinstance(v, bool) or not isinstance(v, int) or v < 0]
    if bad:
        raise ValueError(f"{name} must contain only non-negative integers, got {bad}.")
    for token in ids:
        _check_int64(name, token)
    return ids


def _logprob_count(name: str, value: object) -> int | None:
    if value is None or value is False:
        return None
    if value is True:
        return 1
    count = _integer(name, value)
    if count < -1:
        raise ValueError(f"{name} must be non-negative or -1, got {count}.")
    return count


@dataclass(kw_only=True)
class SamplingParams:
    """Sampling and stopping parameters of one request (vLLM's names and defaults).

    After construction the fields are normalised: `stop`, `stop_token_ids` and `bad_words`
    are lists, `top_k` of 0 or -1 means every token, `max_tokens` is None when unset, and a
    greedy request (temperature < 1e-5) has top_p=1, top_k=0, min_p=0 as in vLLM.
    """

    n: int = 1
    best_of: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        self._normalise()
        self._verify()
        if self.greedy:
            self.top_p, self.top_k, self.min_p = 1.0, 0, 0.0

    @property
    def greedy(self) -> bool:
        """True when the request takes the argmax instead of sampling (temperature < 1e-5)."""
        return self.temperature < SAMPLING_EPS

    def _normalise(self) -> None:
        for name in (
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
            "temperature",
            "top_p",
            "min_p",
        ):
            setattr(self, name, _number(name, getattr(self, name)))
        self.n = _integer("n", self.n)
        self.top_k = _integer("top_k", self.top_k)
        self.min_tokens = _integer("min_tokens", self.min_tokens)
        if self.seed is not None:
            self.seed = _integer("seed", self.seed)
            if self.seed == -1:
                self.seed = None
        if self.max_tokens is not None:
            self.max_tokens = _integer("max_tokens", self.max_tokens)
            if self.max_tokens <= 0:
                self.max_tokens = None
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        else:
            self.stop = list(self.stop)
        ids = [] if self.stop_token_ids is None else self.stop_token_ids
        self.stop_token_ids = list(dict.fromkeys(_token_ids("stop_token_ids", ids)))
        self.bad_words = [] if self.bad_words is None else list(dict.fromkeys(self.bad_words))
        self.logprobs = _logprob_count("logprobs", self.logprobs)
        self.prompt_logprobs = _logprob_count("prompt_logprobs", self.prompt_logprobs)
        if self.logit_bias is not None:
            self.logit_bias = _logit_bias(self.logit_bias)
        if self.allowed_token_ids is not None:
            self.allowed_token_ids = _token_ids("allowed_token_ids", self.allowed_token_ids)

    def _verify(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError(
                f"best_of is not supported, got best_of={self.best_of!r}; "
                f"leave it unset or equal to n={self.n}."
            )
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not -2.0 <= value <= 2.0:
                raise ValueError(f"{name} must be in [-2, 2], got {value}.")
        if not math.isfinite(self.repetition_penalty) or self.repetition_penalty <= 0.0:
            raise ValueError(
                f"repetition_penalty must be a finite number greater than zero, "
                f"got {self.repetition_penalty}."
            )
        if not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be a finite number, got {self.temperature}.")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 or -1 (disable), or at least 1, got {self.top_k}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.min_tokens < 0:
            raise ValueError(
                f"min_tokens must be greater than or equal to 0, got {self.min_tokens}."
            )
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, "
                f"got {self.min_tokens}."
            )
        assert isinstance(self.stop, list) and isinstance(self.bad_words, list)
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must be non-empty strings, got {self.stop!r}.")
        if self.stop and not self.detokenize:
            raise ValueError(
                "stop strings are only supported when detokenize is True, "
                f"got stop={self.stop!r}. Set detokenize=True to use stop."
            )
        if any(not isinstance(w, str) or not w for w in self.bad_words):
            raise ValueError(f"bad_words must be non-empty strings, got {self.bad_words!r}.")
        if self.allowed_token_ids is not None and not self.allowed_token_ids:
            raise ValueError("allowed_token_ids must not be empty when given, got [].")
        if self.greedy and self.n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")

    def verify_for_vocab(self, vocab_size: int, max_logprobs: int = -1) -> None:
        """Check the token ids and logprob counts against a model (vLLM's `verify`).

        `max_logprobs` is the engine's cap on `logprobs`/`prompt_logprobs` (-1: the vocab).
        Raises ValueError naming the offending ids or counts.
        """
        for name in ("logit_bias", "allowed_token_ids", "stop_token_ids"):
            ids = getattr(self, name) or ()
            out_of_vocab = [t for t in ids if t >= vocab_size]
            if out_of_vocab:
                shown = ", ".join(map(str, out_of_vocab[:SHOWN_TOKEN_IDS]))
                more = len(out_of_vocab) - SHOWN_TOKEN_IDS
                raise ValueError(
                    f"token_id(s) [{shown}{f', ... ({more} more)' if more > 0 else ''}] in "
                    f"{name} contain out-of-vocab token ids. Vocabulary size: {vocab_size}"
                )
        cap = vocab_size if max_logprobs == -1 else max_logprobs
        for name in ("logprobs", "prompt_logprobs"):
            count = getattr(self, name)
            if count is None:
                continue
            wanted = vocab_size if count == -1 else count
            if wanted > cap:
                label = "sample" if name == "logprobs" else "prompt"
                raise ValueError(
                    f"Requested {label} logprobs of {wanted}, which is greater than max "
                    f"allowed: {cap}"
                )

    def encode_bad_words(self, encode: Callable[[str], list[int]]) -> list[list[int]]:
        """Token-id sequences of `bad_words`, as vLLM derives them.

        Each word is encoded as written (leading spaces stripped) and, when the tokenizer
        gives a different first token of the same length for it, once more with a leading
        space, so the word is banned both at the start of text and after a space.
        `encode` must not add special tokens (e.g. `lambda s: tok.encode(s, False)`).
        """
        sequences: list[list[int]] = []
        assert isinstance(self.bad_words, list)
        for word in self.bad_words:
            plain = list(encode(word.lstrip()))
            if not plain:
                raise ValueError(
                    f"bad_words entries must tokenize to at least one token, got {word!r}."
                )
            sequences.append(plain)
            spaced = list(encode(" " + word.lstrip()))
            if spaced and spaced[0] != plain[0] and len(spaced) == len(plain):
                sequences.append(spaced)
        return sequences


def _logit_bias(bias: object) -> dict[int, float]:
    if not isinstance(bias, dict):
        raise ValueError(f"logit_bias must be a dict of token id to bias, got {bias!r}.")
    result: dict[int, float] = {}
    for key, value in bias.items():
        if isinstance(key, int) and not isinstance(key, bool):
            token = key
        elif isinstance(key, str) and key.strip().lstrip("-").isdigit():
            token = int(key)
        else:
            raise ValueError(f"logit_bias keys must be integer token ids, got {key!r}.")
        if token < 0:
            raise ValueError(f"logit_bias keys must be non-negative token ids, got {token}.")
        _check_int64("logit_bias keys", token)
        number = _number(f"logit_bias[{token}]", value)
        if not math.isfinite(number):
            raise ValueError(f"logit_bias[{token}] must be a finite number, got {number}.")
        result[token] = number
    return result
