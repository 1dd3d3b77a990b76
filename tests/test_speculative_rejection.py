"""Verification of drafted tokens under sampling keeps the target distribution: over a tiny
vocabulary with fixed logits, the committed tokens follow softmax(logits) position by
position, whatever the draft (chi-square, as in test_sampler_statistics.py), and greedy
verification accepts exactly the drafts that are each row's argmax."""

from __future__ import annotations

import numpy as np
import pytest
from test_sampler_statistics import LOGITS, P_VALUE_FLOOR, _chi_square_p_value

from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import Sampler, SamplingContext
from vllm_tvm.runtime.speculative.verify import verify_greedy, verify_on_host

ROWS = np.stack([LOGITS, LOGITS[::-1], np.roll(LOGITS, 3)]).astype(np.float32)
RUNS = 6000


def _softmax(logits: np.ndarray) -> np.ndarray:
    weights = np.exp(logits.astype(np.float64) - logits.max())
    return weights / weights.sum()


def _verify_many(drafts: list[int], params: SamplingParams) -> list[list[int]]:
    sampler = Sampler(seed=7)
    committed = []
    for _ in range(RUNS):
        ctx = SamplingContext.for_request(params, [])
        committed.append(verify_on_host(sampler, ROWS, ctx, drafts).token_ids)
        assert ctx.output_token_ids == []  # the context is left as it was found
    return committed


@pytest.mark.parametrize("drafts", [[1, 0], [0, 9], [7, 3]])
def test_committed_tokens_follow_the_target_distribution(drafts: list[int]) -> None:
    committed = _verify_many(drafts, SamplingParams(temperature=1.0))
    first = np.array([tokens[0] for tokens in committed])
    assert _chi_square_p_value(first, _softmax(ROWS[0])) > P_VALUE_FLOOR
    second = np.array([tokens[1] for tokens in committed if tokens[0] == drafts[0]])
    assert _chi_square_p_value(second, _softmax(ROWS[1])) > P_VALUE_FLOOR
    for tokens in committed:  # accepted drafts, then one token that is not the next draft
        assert tokens[:-1] == drafts[: len(tokens) - 1]
        assert len(tokens) == len(drafts) + 1 or tokens[-1] != drafts[len(tokens) - 1]


def test_the_test_detects_accepting_every_draft() -> None:
    """The statistic tells a sampler that always took the draft from the target."""
    always = np.full(RUNS, 1)
    assert _chi_square_p_value(always, _softmax(ROWS[0])) < P_VALUE_FLOOR


def test_later_positions_see_the_accepted_drafts_as_output() -> None:
    """A presence penalty on the drafted token applies at the next position: the sampler
    runs each position as if the drafts before it were already output."""
    rows = np.zeros((2, 4), dtype=np.float32)
    rows[:, 2] = 1.0  # token 2 is the argmax of both rows, unless it is penalised
    params = SamplingParams(temperature=0.0, presence_penalty=2.0)
    verified = verify_on_host(Sampler(), rows, SamplingContext.for_request(params, []), [2])
    assert verified.token_ids == [2, 0] and verified.num_accepted == 1


def test_greedy_accepts_the_argmax_prefix_then_corrects() -> None:
    assert verify_greedy([5, 6, 9, 4], [5, 6, 7]).token_ids == [5, 6, 9]
    assert verify_greedy([5, 6, 7, 4], [5, 6, 7]) == ([5, 6, 7, 4], [None] * 4, 3)
    assert verify_greedy([1, 6], [5]).num_accepted == 0


DRAFT_ROWS = np.stack([LOGITS[::-1], np.roll(LOGITS, 5)]).astype(np.float32)
"""A draft model's logits at two positions, far from the target's `ROWS`."""


def _verify_drawn_drafts(params: SamplingParams) -> list[list[int]]:
    """RUNS verifications of two drafts each drawn from softmax(DRAFT_ROWS[i])."""
    sampler, drafting = Sampler(seed=11), np.random.default_rng(5)
    q = np.stack([_softmax(row) for row in DRAFT_ROWS])
    committed = []
    for _ in range(RUNS):
        drafts = [int(drafting.choice(len(LOGITS), p=row)) for row in q]
        ctx = SamplingContext.for_request(params, [])
        committed.append(verify_on_host(sampler, ROWS, ctx, drafts, q).token_ids)
        assert ctx.output_token_ids == []
    return committed


def test_drafts_drawn_from_a_draft_distribution_keep_the_target_distribution() -> None:
    """vLLM's rule min(1, p/q), residual (p - q)+: every position follows p, not q."""
    committed = _verify_drawn_drafts(SamplingParams(temperature=1.0))
    first = np.array([tokens[0] for tokens in committed])
    assert _chi_square_p_value(first, _softmax(ROWS[0])) > P_VALUE_FLOOR
    second = np.array([tokens[1] for tokens in committed if len(tokens) > 1])
    assert _chi_square_p_value(second, _softmax(ROWS[1])) > P_VALUE_FLOOR
    accepted = sum(len(tokens) - 1 for tokens in committed)
    assert 0 < accepted < 2 * RUNS


def test_a_draft_distribution_is_rejected_toward_the_residual_not_the_target() -> None:
    """The statistic tells the residual draw from a redraw from p after a rejection: the
    latter puts too little mass where p exceeds q."""
    p, q = _softmax(ROWS[0]), _softmax(DRAFT_ROWS[0])
    accept = np.minimum(p, q)
    redraw_from_p = accept + (1 - accept.sum()) * p
    rng = np.random.default_rng(2)
    assert _chi_square_p_value(rng.choice(len(p), RUNS, p=redraw_from_p), p) < P_VALUE_FLOOR
