"""Turns one step's logits into the next token of every request in the batch, on the host.

Why it exists: the engine produces a float32 `[batch, vocab]` logits array per step and needs,
for each row, the next token drawn exactly as vLLM v1 would draw it for that request's
`SamplingParams`, plus the logprobs the request asked for. This module is that step, in
numpy, vectorised over the batch where that is cheap. Rows that need none of the host-only
stages are sampled on the device instead (runtime/sampling/device_sampling.py).

How the engine uses it, once per step for the whole batch:

    sampler = Sampler(logprobs_mode="raw_logprobs", eos_token_ids=tokenizer.eos_token_ids)
    ctx = SamplingContext.for_request(params, prompt_ids, encode=...)   # once per request
    out = sampler.sample(logits, [ctx_0, ctx_1, ...])                   # row i <-> ctx_i
    ctx_i.output_token_ids.append(int(out.token_ids[i]))               # engine's job

Stage order (vLLM v1): raw logprobs snapshot -> allowed_token_ids -> bad_words -> min_tokens
-> logit_bias -> repetition/frequency/presence penalties -> greedy argmax for greedy rows;
for the other rows temperature -> min_p -> top_k -> top_p -> random draw -> logprobs gather.

Randomness: a request with a seed draws from its own `numpy.random.Generator` (kept in its
`SamplingContext`), one uniform per step, so the same seed yields the same tokens whatever
else is in the batch. Unseeded requests share the sampler's generator. Greedy rows draw
nothing. The draw is inverse-CDF over the masked distribution, so a token whose probability
is zero (masked by any stage) can never be returned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from vllm_tvm.runtime.sampling.params import LogprobsMode, SamplingParams, check_logprobs_mode


def make_generator(seed: int) -> np.random.Generator:
    """The random generator of a seeded request; any Python int is accepted as a seed."""
    return np.random.default_rng(seed % 2**64)


@dataclass
class SamplingContext:
    """What the sampler reads about one request each step (the engine owns and updates it).

    `output_token_ids` is the request's generated tokens so far; the engine appends to it
    after each step, the sampler only reads it. `generator` is advanced by the sampler.
    """

    params: SamplingParams
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: list[int] = field(default_factory=list)
    generator: np.random.Generator | None = None
    bad_words_token_ids: Sequence[Sequence[int]] = ()

    @classmethod
    def for_request(
        cls,
        params: SamplingParams,
        prompt_token_ids: Sequence[int],
        encode: Callable[[str], list[int]] | None = None,
    ) -> SamplingContext:
        """A fresh context: a generator from `params.seed`, `bad_words` tokenized by `encode`.

        `encode` (text -> ids, no special tokens) is needed only when `params.bad_words` is set.
        """
        if params.bad_words and encode is None:
            raise ValueError(
                f"bad_words={params.bad_words!r} need a tokenizer: pass encode= to for_request"
            )
        return cls(
            params=params,
            prompt_token_ids=list(prompt_token_ids),
            generator=None if params.seed is None else make_generator(params.seed),
            bad_words_token_ids=params.encode_bad_words(encode) if encode else [],
        )


@dataclass(frozen=True)
class TokenLogprobs:
    """Logprob facts about one position: the chosen token and the top alternatives.

    `rank` counts the tokens whose value is >= the chosen token's (vLLM's rank: 1 for the
    best). `top_token_ids`/`top_logprobs` are sorted best first; the
    values are logprobs or logits as the sampler's logprobs mode says.
    """

    token_id: int
    logprob: float
    rank: int
    top_token_ids: np.ndarray
    top_logprobs: np.ndarray


DrawFunction = Callable[[np.ndarray, Sequence[SamplingContext]], np.ndarray]
"""Draws a token per row from processed logits ([rows, vocab]) under the rows' contexts."""


@dataclass(frozen=True)
class SamplerOutput:
    """One step's result: a token per row, and logprobs for rows whose params asked."""

    token_ids: np.ndarray
    logprobs: list[TokenLogprobs | None]


class Sampler:
    """Samples a batch of next tokens with vLLM v1's semantics; see the module docstring.

    `logprobs_mode` picks what returned logprobs describe: raw_* the logits as the model gave
    them, processed_* the logits after temperature, min_p, top_k and top_p (masked: -inf).
    `eos_token_ids` are masked, with each request's `stop_token_ids`, until `min_tokens`
    tokens have been generated. `seed` seeds the generator shared by unseeded requests.
    """

    def __init__(
        self,
        logprobs_mode: LogprobsMode = "raw_logprobs",
        eos_token_ids: Iterable[int] = (),
        seed: int | None = None,
    ) -> None:
        self.logprobs_mode = check_logprobs_mode(logprobs_mode)
        self.eos_token_ids = list(eos_token_ids)
        self._rng = np.random.default_rng(seed)

    def sample(
        self,
        logits: np.ndarray,
        contexts: Sequence[SamplingContext],
        draw: DrawFunction | None = None,
    ) -> SamplerOutput:
        """Sample one token for each row of `logits` ([batch, vocab]) under `contexts[row]`.

        `draw` replaces the random draw of the rows that sample randomly: it gets their
        processed logits (every stage applied; softmax of a row is its distribution) and
        their contexts, and returns a token per row (speculative decoding's rejection step).
        The caller's array is not modified. Raises ValueError when a row has no token left
        (allowed_token_ids, bad_words and min_tokens masked the whole vocabulary).
        """
        logits = np.array(logits, dtype=np.float32, copy=True)
        if logits.ndim != 2 or logits.shape[0] != len(contexts):
            raise ValueError(
                f"logits must be [batch, vocab] with one row per context; got shape "
                f"{logits.shape} for {len(contexts)} contexts"
            )
        params = [ctx.params for ctx in contexts]
        logprob_rows = np.array([p.logprobs is not None for p in params], dtype=bool)
        raw = self._raw_values(logits[logprob_rows]) if logprob_rows.any() else None

        for row, ctx in enumerate(contexts):
            self._restrict_row(logits[row], ctx)
            _penalise_row(logits[row], ctx)
        empty = np.flatnonzero(~(logits > -np.inf).any(axis=1))
        if empty.size:
            raise ValueError(
                f"batch row(s) {empty.tolist()} have no token left to sample: "
                "allowed_token_ids, bad_words and min_tokens masked the whole vocabulary"
            )

        greedy = np.array([p.greedy for p in params], dtype=bool)
        token_ids = np.zeros(len(contexts), dtype=np.int64)
        token_ids[greedy] = logits[greedy].argmax(axis=1)
        random_rows = np.flatnonzero(~greedy)
        if random_rows.size:
            processed = logits[random_rows]
            _process_for_sampling(processed, [params[r] for r in random_rows])
            random_contexts = [contexts[r] for r in random_rows]
            token_ids[random_rows] = (draw or self._draw)(processed, random_contexts)
            logits[random_rows] = processed

        per_row: list[TokenLogprobs | None] = [None] * len(contexts)
        if logprob_rows.any():
            values = raw if raw is not None else self._processed_values(logits[logprob_rows])
            rows = np.flatnonzero(logprob_rows)
            vocab = logits.shape[1]
            counts = [vocab if params[r].logprobs == -1 else params[r].logprobs for r in rows]
            for row, entry in zip(rows, _gather(values, token_ids[rows], counts), strict=True):
                per_row[row] = entry
        return SamplerOutput(token_ids=token_ids, logprobs=per_row)

    def _raw_values(self, logits: np.ndarray) -> np.ndarray | None:
        """The logprobs source in raw_* modes, taken before any processing; else None."""
        if self.logprobs_mode == "raw_logprobs":
            return _log_softmax(logits)
        if self.logprobs_mode == "raw_logits":
            return logits
        return None

    def _processed_values(self, logits: np.ndarray) -> np.ndarray:
        """The logprobs source in processed_* modes. Greedy rows are processed only up to the
        penalties (their temperature counts as 1 and they skip min_p/top_k/top_p), as in vLLM.
        """
        return _log_softmax(logits) if self.logprobs_mode == "processed_logprobs" else logits

    def _restrict_row(self, row: np.ndarray, ctx: SamplingContext) -> None:
        """allowed_token_ids, bad_words, min_tokens and logit_bias on one row, in vLLM's order."""
        params = ctx.params
        if params.allowed_token_ids is not None:
            banned = np.ones(row.shape[0], dtype=bool)
            banned[params.allowed_token_ids] = False
            row[banned] = -np.inf
        output = ctx.output_token_ids
        for word in ctx.bad_words_token_ids:
            prefix = list(word[:-1])
            if len(prefix) > len(output):
                continue
            if not prefix or list(output[len(output) - len(prefix) :]) == prefix:
                row[word[-1]] = -np.inf
        if params.min_tokens and len(output) < params.min_tokens:
            assert params.stop_token_ids is not None
            stops = [*params.stop_token_ids, *self.eos_token_ids]
            if stops:
                row[stops] = -np.inf
        if params.logit_bias:
            ids = np.fromiter(params.logit_bias.keys(), dtype=np.int64)
            row[ids] += np.fromiter(params.logit_bias.values(), dtype=np.float32)

    def uniforms(self, contexts: Sequence[SamplingContext]) -> np.ndarray:
        """One uniform in [0, 1) per context, the randomness of one random draw each: seeded
        contexts from their own generator, the others from the sampler's shared one. The
        device sampler (runtime/sampling/device_sampling.py) draws through this too, so a request
        advances its generator once per token whichever path samples it."""
        uniforms = np.empty(len(contexts))
        shared = [i for i, ctx in enumerate(contexts) if ctx.generator is None]
        uniforms[shared] = self._rng.random(len(shared))
        for i, ctx in enumerate(contexts):
            if ctx.generator is not None:
                uniforms[i] = ctx.generator.random()
        return uniforms

    def _draw(self, logits: np.ndarray, contexts: Sequence[SamplingContext]) -> np.ndarray:
        """One draw per row from softmax(logits); seeded rows use their own generator."""
        uniforms = self.uniforms(contexts)
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        return inverse_cdf(weights, uniforms)


_CDF_BLOCK = 1024


def inverse_cdf(weights: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Per row, the index i with cdf[i-1] <= uniform * total < cdf[i] over `weights` >= 0.

    Sums run in float64 in two levels, block totals then the prefix sums of the one block
    the target falls in, so no whole-vocab float64 CDF is built. A token of zero weight is
    never returned: the chosen block and token are where the CDF strictly rises.
    """
    rows, vocab = weights.shape
    width = min(_CDF_BLOCK, vocab)
    starts = np.arange(0, vocab, width)
    block_cdf = np.cumsum(np.add.reduceat(weights, starts, axis=1, dtype=np.float64), axis=1)
    total = block_cdf[:, -1]
    # uniform < 1, but uniform * total can round up to total: keep the target below it.
    targets = np.minimum(uniforms * total, np.nextafter(total, -np.inf))
    blocks = (block_cdf <= targets[:, None]).sum(axis=1)
    columns = starts[blocks][:, None] + np.arange(width)
    block_weights = np.where(
        columns < vocab, np.take_along_axis(weights, np.minimum(columns, vocab - 1), axis=1), 0
    )
    base = np.where(blocks > 0, block_cdf[np.arange(rows), blocks - 1], 0.0)
    local_cdf = base[:, None] + np.cumsum(block_weights, axis=1, dtype=np.float64)
    index = (local_cdf <= targets[:, None]).sum(axis=1)
    # The block's prefix sums can round to end at the target: take its last weighted token.
    last_weighted = width - 1 - np.argmax(block_weights[:, ::-1] > 0, axis=1)
    return starts[blocks] + np.minimum(index, last_weighted)


def prompt_logprobs(
    logits: np.ndarray,
    prompt_token_ids: Sequence[int],
    num_logprobs: int,
    start: int = 0,
) -> list[TokenLogprobs]:
    """Logprobs of prompt tokens, each given the model's logits at the position before it.

    `logits[j]` is the output at prompt position `start + j`; it scores prompt token
    `start + j + 1`. Rows past the prompt's last position are ignored, so the caller may pass
    a prefill chunk including its final row. Returns one entry per scored prompt token (the
    first prompt token is never scored). Like vLLM these are always log-softmax of the raw
    logits, whatever the sampler's logprobs mode; `num_logprobs=-1` means the whole vocab.
    """
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 2:
        raise ValueError(f"logits must be [positions, vocab], got shape {logits.shape}")
    if num_logprobs < -1:
        raise ValueError(f"num_logprobs must be non-negative or -1, got {num_logprobs}")
    if not 0 <= start < max(len(prompt_token_ids), 1):
        raise ValueError(f"start must be in [0, {len(prompt_token_ids)}), got {start}")
    targets = np.asarray(prompt_token_ids[start + 1 : start + 1 + logits.shape[0]], np.int64)
    if targets.size == 0:
        return []
    values = _log_softmax(logits[: targets.size])
    count = logits.shape[1] if num_logprobs == -1 else num_logprobs
    return _gather(values, targets, [count] * targets.size)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _penalise_row(row: np.ndarray, ctx: SamplingContext) -> None:
    """Repetition (prompt+output), then frequency and presence (output) penalties, in place.

    Repetition divides positive logits and multiplies the others by the penalty for tokens
    seen in prompt or output; frequency subtracts penalty * count, presence penalty * seen.
    Only the ids that occur are touched.
    """
    params = ctx.params
    rep, freq, pres = params.repetition_penalty, params.frequency_penalty, params.presence_penalty
    if rep == 1.0 and freq == 0.0 and pres == 0.0:
        return
    output_ids, output_counts = np.unique(
        np.asarray(ctx.output_token_ids, dtype=np.int64), return_counts=True
    )
    if rep != 1.0:
        seen = np.union1d(output_ids, np.asarray(ctx.prompt_token_ids, dtype=np.int64))
        values = row[seen]
        row[seen] = np.where(values > 0, values / np.float32(rep), values * np.float32(rep))
    if output_ids.size:
        row[output_ids] -= freq * output_counts + pres


def _process_for_sampling(logits: np.ndarray, params: Sequence[SamplingParams]) -> None:
    """Temperature, min_p, top_k, top_p, in place, on rows that sample randomly."""
    logits /= np.array([p.temperature for p in params], np.float32)[:, None]
    vocab = logits.shape[1]
    maxima = logits.max(axis=1)
    for row, maximum, p in zip(logits, maxima, params, strict=True):
        if p.min_p > 0.0:
            # vLLM masks prob < min_p * max_prob; that ratio is exp(logit - max_logit).
            row[np.exp(row - maximum) < p.min_p] = -np.inf
        if 0 < p.top_k < vocab:
            kth_largest = np.partition(row, vocab - p.top_k)[vocab - p.top_k]
            row[row < kth_largest] = -np.inf
    top_p_rows = [r for r, p in enumerate(params) if p.top_p < 1.0]
    if top_p_rows:
        top_p = np.array([params[r].top_p for r in top_p_rows])
        logits[top_p_rows] = _apply_top_p(logits[top_p_rows], top_p)


def _apply_top_p(logits: np.ndarray, top_p: np.ndarray) -> np.ndarray:
    """vLLM's top-p: in ascending order, drop tokens while the mass up to them is <= 1 - p.

    The most likely token always stays. The cut is applied as a logit threshold, so tokens
    tied with the last kept one stay too (vLLM breaks such ties by sort position).
    """
    ascending = np.sort(logits, axis=1)
    mass_up_to = np.cumsum(np.exp(ascending - ascending[:, -1:]), axis=1)
    dropped = (mass_up_to <= (1.0 - top_p)[:, None] * mass_up_to[:, -1:]).sum(axis=1)
    dropped = np.minimum(dropped, logits.shape[1] - 1)
    threshold = ascending[np.arange(len(logits)), dropped][:, None]
    return np.where(logits < threshold, np.float32(-np.inf), logits)


def _top_ids(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values per row, best first (equal values: lower id first)."""
    vocab = values.shape[1]
    if k >= vocab:
        return np.argsort(-values, axis=1, kind="stable")
    candidates = np.sort(np.argpartition(-values, k - 1, axis=1)[:, :k], axis=1)
    order = np.argsort(-np.take_along_axis(values, candidates, axis=1), axis=1, kind="stable")
    return np.take_along_axis(candidates, order, axis=1)


def _gather(
    values: np.ndarray, token_ids: np.ndarray, counts: Sequence[int]
) -> list[TokenLogprobs]:
    """Chosen token's value and rank plus the top `counts[i]` of row i (vLLM's gather)."""
    chosen = values[np.arange(values.shape[0]), token_ids]
    ranks = (values >= chosen[:, None]).sum(axis=1)
    widest = max(counts)
    top = _top_ids(values, widest) if widest else np.zeros((values.shape[0], 0), np.int64)
    top_values = np.take_along_axis(values, top, axis=1)
    return [
        TokenLogprobs(
            token_id=int(token_ids[i]),
            logprob=float(chosen[i]),
            rank=int(ranks[i]),
            top_token_ids=top[i, :k],
            top_logprobs=top_values[i, :k],
        )
        for i, k in enumerate(counts)
    ]
