"""Which drafted tokens the target model accepts, and the token that follows them.

Why it exists: a verify forward yields the target's logits at the last committed token and
after each draft token. The committed tokens must be distributed exactly as if the target
had decoded them one by one. For a deterministic proposer (the draft is a point mass q on
token x), vLLM's rejection rule "accept x with probability min(1, p(x)/q(x)), else draw from
norm(max(0, p - q))" is: accept x with probability p(x), else draw from p with x removed,
renormalised. That is exactly "draw t from p; accept x iff t == x, else t is the
replacement": P(t = x) = p(x), and given t != x, t is distributed as p without x,
renormalised. So each position is sampled with the request's own sampler (every stage of it:
penalties, min_tokens, logit bias, seeds, logprobs) as if the accepted drafts before it were
already output, and verification stops at the first mismatch. Under greedy sampling this is
argmax against the draft, so the output equals the non-speculative one token for token.
After k accepted drafts the last row gives the bonus token.

A draft model samples its drafts from a distribution q of its own (draft_model.py). Then a
sampled position runs vLLM's rule itself: p is the distribution the request's sampler would
draw from (every stage applied), draft x is accepted when u * q(x) < p(x) for a uniform u
of the request's randomness, and otherwise the token is drawn from norm(max(0, p - q)),
which is zero at x. Greedy positions stay argmax against the draft (q is then a point mass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from vllm_tvm.runtime.sampling.sampler import (
    DrawFunction,
    Sampler,
    SamplingContext,
    TokenLogprobs,
    inverse_cdf,
)


class Verified(NamedTuple):
    """The tokens one verification commits: the accepted drafts then one sampled token
    (with logprobs where the request asked), and how many drafts were accepted."""

    token_ids: list[int]
    logprobs: list[TokenLogprobs | None]
    num_accepted: int


def accept_drafts(
    draft_token_ids: Sequence[int],
    sample_position: Callable[[int], tuple[int, TokenLogprobs | None]],
) -> Verified:
    """Sample position 0, 1, ... with `sample_position(i)` (the token after the committed
    tokens and drafts[:i]) until a sample differs from the draft at its position, or every
    draft was accepted and the bonus position was sampled."""
    token_ids: list[int] = []
    logprobs: list[TokenLogprobs | None] = []
    for position in range(len(draft_token_ids) + 1):
        token_id, entry = sample_position(position)
        token_ids.append(token_id)
        logprobs.append(entry)
        if position == len(draft_token_ids) or token_id != draft_token_ids[position]:
            break
    return Verified(token_ids, logprobs, len(token_ids) - 1)


def verify_on_host(
    sampler: Sampler,
    rows: np.ndarray,
    ctx: SamplingContext,
    draft_token_ids: Sequence[int],
    draft_probs: np.ndarray | None = None,
) -> Verified:
    """`accept_drafts` with `rows[i]` (the target's logits at draft position i) sampled by
    `sampler` under `ctx`, its output extended by the drafts accepted before i (the context
    is left as it was found). `draft_probs[i]`: the distribution draft i was drawn from (None:
    each draft is certain, as a proposer without a model's distribution drafts)."""
    outputs = ctx.output_token_ids
    committed = len(outputs)

    def sample_position(position: int) -> tuple[int, TokenLogprobs | None]:
        del outputs[committed:]
        outputs.extend(draft_token_ids[:position])
        draw = None
        if draft_probs is not None and position < len(draft_token_ids):
            draw = rejection_draw(sampler, draft_token_ids[position], draft_probs[position])
        result = sampler.sample(rows[position : position + 1], [ctx], draw)
        return int(result.token_ids[0]), result.logprobs[0]

    try:
        return accept_drafts(draft_token_ids, sample_position)
    finally:
        del outputs[committed:]


def verify_greedy(targets: Sequence[int], draft_token_ids: Sequence[int]) -> Verified:
    """`accept_drafts` when each position's token is already known (the argmax of its row,
    for greedy requests whose sampling changes no logit)."""
    return accept_drafts(draft_token_ids, lambda position: (int(targets[position]), None))


def rejection_draw(sampler: Sampler, draft_token_id: int, draft_probs: np.ndarray) -> DrawFunction:
    """The draw of one position drafted as `draft_token_id` from `draft_probs` (q): accept
    it with probability min(1, p/q), else draw from norm(max(0, p - q))."""

    def draw(processed: np.ndarray, contexts: Sequence[SamplingContext]) -> np.ndarray:
        weights = np.exp(processed[0].astype(np.float64) - processed[0].max())
        target = weights / weights.sum()
        draft = draft_probs.astype(np.float64)
        accept = sampler.uniforms(contexts)[0] * draft[draft_token_id] < target[draft_token_id]
        residual = np.maximum(target - draft, 0.0)
        if accept or not residual.any():
            return np.array([draft_token_id])
        return inverse_cdf(residual[None, :], sampler.uniforms(contexts))

    return draw
