"""Helpers of the device sampling tests: the oracle distribution a sampled row must follow,
a chi-square check of draws against it, and rows with tied maxima."""

from __future__ import annotations

import numpy as np


def kept_distribution(
    row: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0
) -> np.ndarray:
    """The probabilities a sampled row draws from, recomputed from vLLM's definitions:
    softmax(row / temperature), then drop tokens below min_p * max prob, keep the top_k
    most likely, then the smallest most-likely set whose mass reaches top_p; renormalise."""
    scaled = row.astype(np.float64) / temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if min_p > 0:
        probs[probs < min_p * probs.max()] = 0
    if 0 < top_k < len(row):
        kth = np.sort(probs)[len(row) - top_k]
        probs[probs < kth] = 0
    probs /= probs.sum()
    if top_p < 1:
        order = np.argsort(-probs, kind="stable")
        mass_before = np.cumsum(probs[order]) - probs[order]
        dropped = order[mass_before >= top_p]
        probs[dropped] = 0
        probs /= probs.sum()
    return probs


def chi_square(tokens: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of `tokens` against `probs` and its degrees of freedom; tokens of
    zero probability must not occur (AssertionError), bins expecting < 5 draws are merged."""
    counts = np.bincount(tokens, minlength=len(probs)).astype(np.float64)
    assert counts[probs == 0].sum() == 0, "drew a token the filters remove"
    expected = probs * len(tokens)
    big = expected >= 5
    observed = [*counts[big], counts[~big & (probs > 0)].sum()]
    wanted = [*expected[big], expected[~big & (probs > 0)].sum()]
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    obs, exp = np.array(observed), np.array(wanted)
    return float(((obs - exp) ** 2 / exp).sum()), len(obs) - 1


def chi_square_limit(dof: int) -> float:
    """A bound the statistic of a correct sampler exceeds with probability ~1e-4 (normal
    approximation of the chi-square tail, 3.7 standard deviations)."""
    return dof + 3.7 * np.sqrt(2 * dof) + 5


def tied_rows(vocab: int) -> np.ndarray:
    """Rows whose maxima repeat, sit at the ends, or are -inf everywhere."""
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((6, vocab)).astype(np.float32)
    rows[0, [3, 9, vocab - 1]] = 7.0  # three equal maxima
    rows[1, [0, vocab - 1]] = 9.0  # at both ends
    rows[2, vocab - 1] = 11.0  # only the last
    rows[3] = -np.inf  # nothing but -inf
    rows[4] = 0.5  # constant
    rows[5, [vocab // 2, vocab // 2 + 1]] = np.float32(3.25)  # neighbours
    return rows
