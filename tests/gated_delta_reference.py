"""float64 numpy references of the Gated DeltaNet recurrences, token by token.

The independent oracle of the TIR kernels (schedules/gated_delta_rule.py, causal_conv1d.py):
the plain per-token recurrence (no chunking, no UT system), written from the formulas of
transformers' `torch_recurrent_gated_delta_rule` and `causal_conv1d_update`.
"""

from __future__ import annotations

import numpy as np


def delta_rule(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    state: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """One sequence: q, k [n, heads_k, k_dim], v [n, heads_v, v_dim], g, beta [n, heads_v],
    state [heads_v, k_dim, v_dim] -> (out [n, heads_v, v_dim], final state), in float64."""
    heads_k, heads_v = q.shape[1], v.shape[1]
    group = heads_v // heads_k
    state = state.astype(np.float64).copy()
    out = np.zeros(v.shape, np.float64)
    for t in range(q.shape[0]):
        for h in range(heads_v):
            qt, kt = q[t, h // group].astype(np.float64), k[t, h // group].astype(np.float64)
            state[h] *= np.exp(g[t, h])
            delta = (v[t, h] - state[h].T @ kt) * beta[t, h]
            state[h] += np.outer(kt, delta)
            out[t, h] = state[h].T @ qt
    return out, state


def causal_conv(
    x: np.ndarray, weight: np.ndarray, state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One sequence: x [n, channels], weight [channels, K], state [K - 1, channels] (the
    inputs before x, oldest first) -> (silu(conv) [n, channels], new state), in float64."""
    taps = weight.shape[1]
    padded = np.concatenate([state, x]).astype(np.float64)
    conv = np.stack([(padded[t : t + taps] * weight.T).sum(0) for t in range(x.shape[0])])
    conv = conv.reshape(x.shape)
    return conv / (1.0 + np.exp(-conv)), padded[len(padded) - (taps - 1) :]
