"""Sampler draws, thousands at a time over small vocabularies: masked tokens never come out,
and the empirical distribution matches the one vLLM's formulas give (chi-square, with the
p-value from torch's regularised incomplete gamma function as the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import Sampler, SamplingContext

LOGITS = np.array([2.0, 1.6, 1.1, 0.7, 0.2, -0.3, -0.9, -1.5, -2.2, -3.0], dtype=np.float32)
DRAWS = 6000
P_VALUE_FLOOR = 1e-4


def _draw(params: SamplingParams, draws: int = DRAWS, seeded: bool = False) -> np.ndarray:
    """`draws` tokens for the same logits: one batch of independent requests."""
    contexts = [
        SamplingContext.for_request(
            SamplingParams(**{**vars(params), "seed": i if seeded else None}), []
        )
        for i in range(draws)
    ]
    logits = np.tile(LOGITS, (draws, 1))
    return Sampler(seed=2024).sample(logits, contexts).token_ids


def _expected(temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0):
    """The distribution vLLM samples from, recomputed in float64 with torch."""
    probs = torch.softmax(torch.from_numpy(LOGITS).double() / temperature, dim=0)
    keep = probs >= min_p * probs.max()
    if top_k:
        keep &= probs >= torch.topk(probs, top_k).values[-1]
    probs = torch.where(keep, probs, 0.0)
    probs = probs / probs.sum()
    more_likely_mass = torch.stack([probs[probs > q].sum() for q in probs])
    probs = torch.where(more_likely_mass < top_p, probs, 0.0)
    return (probs / probs.sum()).numpy()


def _chi_square_p_value(tokens: np.ndarray, expected: np.ndarray) -> float:
    """Pearson's test over the support, pooling bins expected below 5 draws."""
    observed = np.bincount(tokens, minlength=len(expected)).astype(np.float64)
    wanted = expected * len(tokens)
    support = wanted > 0
    observed, wanted = observed[support], wanted[support]
    small = wanted < 5
    if small.any():
        observed = np.append(observed[~small], observed[small].sum())
        wanted = np.append(wanted[~small], wanted[small].sum())
    statistic = float(((observed - wanted) ** 2 / wanted).sum())
    dof = len(wanted) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(statistic / 2.0)))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_draws_follow_softmax_of_logits_over_temperature(temperature: float) -> None:
    tokens = _draw(SamplingParams(temperature=temperature))
    assert _chi_square_p_value(tokens, _expected(temperature)) > P_VALUE_FLOOR


def test_seeded_draws_follow_the_same_distribution() -> None:
    tokens = _draw(SamplingParams(temperature=1.0), seeded=True)
    assert _chi_square_p_value(tokens, _expected(1.0)) > P_VALUE_FLOOR


def test_the_bound_detects_a_missing_temperature() -> None:
    tokens = _draw(SamplingParams(temperature=0.5))
    assert _chi_square_p_value(tokens, _expected(1.0)) < P_VALUE_FLOOR


FILTERS = [
    {"top_k": 3},
    {"top_p": 0.5},
    {"top_p": 0.85},
    {"min_p": 0.2},
    {"min_p": 0.05, "top_k": 6, "top_p": 0.9},
]


def _name(filters: dict) -> str:
    return ",".join(f"{key}={value}" for key, value in filters.items())


@pytest.mark.parametrize("filters", [*FILTERS, {"top_k": 1}, {"top_p": 0.05}], ids=_name)
def test_filtered_tokens_are_never_drawn(filters: dict) -> None:
    expected = _expected(0.8, **filters)
    assert 0 < (expected > 0).sum() < len(LOGITS), "the filter must mask something"
    tokens = _draw(SamplingParams(temperature=0.8, **filters))
    assert set(np.unique(tokens).tolist()) <= set(np.flatnonzero(expected > 0).tolist())


@pytest.mark.parametrize("filters", FILTERS, ids=_name)
def test_filtered_draws_follow_the_renormalised_distribution(filters: dict) -> None:
    tokens = _draw(SamplingParams(temperature=0.8, **filters))
    assert _chi_square_p_value(tokens, _expected(0.8, **filters)) > P_VALUE_FLOOR


def test_logit_bias_and_penalties_shape_the_drawn_distribution() -> None:
    params = SamplingParams(logit_bias={9: 4.0}, presence_penalty=1.5)
    contexts = []
    for _ in range(DRAWS):
        ctx = SamplingContext.for_request(params, [])
        ctx.output_token_ids.append(0)
        contexts.append(ctx)
    tokens = Sampler(seed=7).sample(np.tile(LOGITS, (DRAWS, 1)), contexts).token_ids
    shaped = LOGITS.astype(np.float64)
    shaped[9] += 4.0
    shaped[0] -= 1.5
    expected = torch.softmax(torch.from_numpy(shaped), dim=0).numpy()
    assert _chi_square_p_value(tokens, expected) > P_VALUE_FLOOR


SPREAD_IDS = [3, 1100, 1101, 2047, 2048, 2499]


def test_draws_over_a_large_vocab_follow_the_distribution_across_blocks() -> None:
    """Allowed ids spread over several 1024-token stretches, with empty stretches between."""
    logits = np.zeros(2500, dtype=np.float32)
    logits[SPREAD_IDS] = [0.5, -0.2, 1.0, 0.0, 0.3, -0.6]
    params = SamplingParams(allowed_token_ids=SPREAD_IDS)
    contexts = [SamplingContext.for_request(params, []) for _ in range(DRAWS)]
    tokens = Sampler(seed=11).sample(np.tile(logits, (DRAWS, 1)), contexts).token_ids
    assert set(np.unique(tokens).tolist()) <= set(SPREAD_IDS)
    expected = np.zeros(2500)
    expected[SPREAD_IDS] = torch.softmax(torch.from_numpy(logits[SPREAD_IDS]).double(), 0).numpy()
    assert _chi_square_p_value(tokens, expected) > P_VALUE_FLOOR


class _FixedUniform:
    """Stands in for a request's generator: always returns the same uniform."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(
    ("uniform", "expected"), [(0.0, SPREAD_IDS[0]), (np.nextafter(1.0, 0.0), SPREAD_IDS[-1])]
)
def test_extreme_uniforms_still_pick_an_allowed_token(uniform: float, expected: int) -> None:
    ctx = SamplingContext.for_request(SamplingParams(allowed_token_ids=SPREAD_IDS), [])
    ctx.generator = _FixedUniform(uniform)  # type: ignore[assignment]
    logits = np.zeros((1, 2500), dtype=np.float32)
    assert Sampler().sample(logits, [ctx]).token_ids[0] == expected
