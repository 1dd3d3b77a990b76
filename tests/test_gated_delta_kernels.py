"""The Gated DeltaNet kernels on CPU equal a float64 token-by-token reference.

Covered: the chunked prefill scan over a ragged batch (sequences of several chunks, an exact
chunk, a tail shorter than a chunk, one token), with nonzero states handed in; a sequence
prefilled in two calls with the state carried between them; decode steps after a prefill;
grouped heads (two value heads per key head); the causal conv with its rolling state, for
prompts shorter than the kernel and for one-token decode steps; states updated in place at
the batch's slots of a larger pool, the other slots bit-for-bit unchanged.

Tolerance: 2e-5 absolute on outputs and states of O(1) magnitude (fp32 kernels against a
float64 recurrence; the errors measured are below 1e-6).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tvm
from gated_delta_reference import causal_conv, delta_rule

from vllm_tvm.schedules.causal_conv1d import causal_conv1d
from vllm_tvm.schedules.gated_delta_rule import CHUNK, delta_rule_chunked, delta_rule_step

HEADS_K, HEADS_V, K_DIM, V_DIM = 2, 4, 32, 16
CHANNELS, KERNEL = 40, 4
TOLERANCE = 2e-5


def _build(func: tvm.tirx.PrimFunc) -> tvm.runtime.Module:
    module = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    return tvm.compile(module, target="llvm")["main"]


@pytest.fixture(scope="module")
def kernels() -> dict:
    """The three kernels built for this CPU, once."""
    return {
        "chunked": _build(delta_rule_chunked(HEADS_K, HEADS_V, K_DIM, V_DIM, gpu=False)),
        "step": _build(delta_rule_step(HEADS_K, HEADS_V, K_DIM, V_DIM, gpu=False)),
        "conv": _build(causal_conv1d(CHANNELS, KERNEL, gpu=False)),
    }


def _tensor(array: np.ndarray) -> tvm.runtime.Tensor:
    dtype = np.int32 if array.dtype.kind == "i" else np.float32
    return tvm.runtime.tensor(np.ascontiguousarray(array, dtype=dtype))


def _tokens(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """q, k L2-normalised (q also scaled by k_dim^-0.5), v, g <= 0, beta in (0, 1)."""
    q = rng.standard_normal((n, HEADS_K, K_DIM))
    k = rng.standard_normal((n, HEADS_K, K_DIM))
    q = q / np.linalg.norm(q, axis=-1, keepdims=True) * K_DIM**-0.5
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((n, HEADS_V, V_DIM))
    g = -np.abs(rng.standard_normal((n, HEADS_V))) * 0.2
    beta = 1.0 / (1.0 + np.exp(-rng.standard_normal((n, HEADS_V))))
    return tuple(a.astype(np.float32).astype(np.float64) for a in (q, k, v, g, beta))


def _starts(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def _slots(slots: list[int] | None, batch: int) -> tvm.runtime.Tensor:
    """The batch's pool slots (default: slot b for sequence b)."""
    return _tensor(np.asarray(range(batch) if slots is None else slots))


def _run_chunked(kernels: dict, tokens: tuple, starts: np.ndarray, pool: np.ndarray, slots=None):
    """(out, the pool after the call): the kernel updates its slots in place."""
    n, batch = tokens[0].shape[0], len(starts) - 1
    out = tvm.runtime.tensor(np.zeros((n, HEADS_V, V_DIM), np.float32))
    states = _tensor(pool)
    kernels["chunked"](*map(_tensor, tokens), _tensor(starts), _slots(slots, batch), states, out)
    return out.numpy(), states.numpy()


def _run_step(kernels: dict, tokens: tuple, pool: np.ndarray, slots=None):
    batch = tokens[0].shape[0]
    out = tvm.runtime.tensor(np.zeros((batch, HEADS_V, V_DIM), np.float32))
    states = _tensor(pool)
    kernels["step"](*map(_tensor, tokens), _slots(slots, batch), states, out)
    return out.numpy(), states.numpy()


def _states(rng: np.random.Generator, batch: int) -> np.ndarray:
    return (rng.standard_normal((batch, HEADS_V, K_DIM, V_DIM)) * 0.5).astype(np.float32)


def _rows(tokens: tuple, begin: int, end: int) -> tuple:
    return tuple(a[begin:end] for a in tokens)


def test_chunked_scan_of_a_ragged_batch_equals_the_recurrence(kernels: dict) -> None:
    rng = np.random.default_rng(0)
    lengths = [2 * CHUNK + 37, CHUNK, 1, 5]
    starts = _starts(lengths)
    tokens = _tokens(rng, sum(lengths))
    states = _states(rng, len(lengths))
    out, new_states = _run_chunked(kernels, tokens, starts, states)
    for seq, (begin, end) in enumerate(itertools.pairwise(starts)):
        want_out, want_state = delta_rule(*_rows(tokens, begin, end), states[seq])
        np.testing.assert_allclose(out[begin:end], want_out, atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(new_states[seq], want_state, atol=TOLERANCE, rtol=0)


def test_a_prefill_split_in_two_calls_carries_the_state(kernels: dict) -> None:
    rng = np.random.default_rng(1)
    tokens = _tokens(rng, 150)
    states = np.zeros((1, HEADS_V, K_DIM, V_DIM), np.float32)
    first_out, carried = _run_chunked(kernels, _rows(tokens, 0, 70), _starts([70]), states)
    second_out, final = _run_chunked(kernels, _rows(tokens, 70, 150), _starts([80]), carried)
    want_out, want_state = delta_rule(*tokens, states[0])
    np.testing.assert_allclose(
        np.concatenate([first_out, second_out]), want_out, atol=TOLERANCE, rtol=0
    )
    np.testing.assert_allclose(final[0], want_state, atol=TOLERANCE, rtol=0)


def test_decode_steps_after_a_prefill_continue_the_recurrence(kernels: dict) -> None:
    rng = np.random.default_rng(2)
    lengths, steps = [70, 3], 4
    prompt = _tokens(rng, sum(lengths))
    decoded = [_tokens(rng, len(lengths)) for _ in range(steps)]
    states = _states(rng, len(lengths))
    starts = _starts(lengths)
    _, carried = _run_chunked(kernels, prompt, starts, states)
    outs = []
    for step_tokens in decoded:
        out, carried = _run_step(kernels, step_tokens, carried)
        outs.append(out)
    for seq, (begin, end) in enumerate(itertools.pairwise(starts)):
        history = [
            np.concatenate([a[begin:end]] + [d[i][seq : seq + 1] for d in decoded])
            for i, a in enumerate(prompt)
        ]
        want_out, want_state = delta_rule(*history, states[seq])
        got = np.stack([out[seq] for out in outs])
        np.testing.assert_allclose(got, want_out[-steps:], atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(carried[seq], want_state, atol=TOLERANCE, rtol=0)


def _run_conv(kernels: dict, x: np.ndarray, weight: np.ndarray, starts, pool, slots=None):
    y = tvm.runtime.tensor(np.zeros(x.shape, np.float32))
    states = _tensor(pool)
    slot_ids = _slots(slots, len(starts) - 1)
    kernels["conv"](_tensor(x), _tensor(weight), _tensor(starts), slot_ids, states, y)
    return y.numpy(), states.numpy()


def test_causal_conv_prefill_and_decode_roll_the_state(kernels: dict) -> None:
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((CHANNELS, KERNEL)).astype(np.float32)
    lengths = [11, 2, 1]
    starts = _starts(lengths)
    x = rng.standard_normal((sum(lengths), CHANNELS)).astype(np.float32)
    states = rng.standard_normal((len(lengths), KERNEL - 1, CHANNELS)).astype(np.float32)
    y, carried = _run_conv(kernels, x, weight, starts, states)
    steps = rng.standard_normal((2, len(lengths), CHANNELS)).astype(np.float32)
    step_ys = []
    for step in steps:
        step_y, carried = _run_conv(kernels, step, weight, _starts([1] * len(lengths)), carried)
        step_ys.append(step_y)
    for seq, (begin, end) in enumerate(itertools.pairwise(starts)):
        history = np.concatenate([x[begin:end], steps[:, seq]])
        want_y, want_state = causal_conv(history, weight, states[seq])
        got_y = np.concatenate([y[begin:end], np.stack([s[seq] for s in step_ys])])
        np.testing.assert_allclose(got_y, want_y, atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(carried[seq], want_state, atol=TOLERANCE, rtol=0)


def test_states_live_at_their_slots_and_other_slots_stay_as_they_were(kernels: dict) -> None:
    rng = np.random.default_rng(4)
    slots, lengths = [3, 0], [66, 4]
    starts = _starts(lengths)
    pool = _states(rng, 5)
    prompt = _tokens(rng, sum(lengths))
    step = _tokens(rng, len(slots))
    _, after_prefill = _run_chunked(kernels, prompt, starts, pool, slots)
    step_out, after_step = _run_step(kernels, step, after_prefill, slots)
    for seq, slot in enumerate(slots):
        history = [
            np.concatenate([a[starts[seq] : starts[seq + 1]], d[seq : seq + 1]])
            for a, d in zip(prompt, step, strict=True)
        ]
        want_out, want_state = delta_rule(*history, pool[slot])
        np.testing.assert_allclose(step_out[seq], want_out[-1], atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(after_step[slot], want_state, atol=TOLERANCE, rtol=0)
    untouched = [1, 2, 4]
    np.testing.assert_array_equal(after_step[untouched], pool[untouched])
    conv_pool = rng.standard_normal((5, KERNEL - 1, CHANNELS)).astype(np.float32)
    weight = rng.standard_normal((CHANNELS, KERNEL)).astype(np.float32)
    x = rng.standard_normal((sum(lengths), CHANNELS)).astype(np.float32)
    y, conv_after = _run_conv(kernels, x, weight, starts, conv_pool, slots)
    for seq, slot in enumerate(slots):
        want_y, want_state = causal_conv(x[starts[seq] : starts[seq + 1]], weight, conv_pool[slot])
        np.testing.assert_allclose(y[starts[seq] : starts[seq + 1]], want_y, atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(conv_after[slot], want_state, atol=TOLERANCE, rtol=0)
    np.testing.assert_array_equal(conv_after[untouched], conv_pool[untouched])


def test_strong_decays_underflow_to_zero_without_overflow(kernels: dict) -> None:
    """Log decays down to -40 a token (A up to 16 times a large softplus) drive the chunk's
    cumulative decay far below fp32's range: every exp the scan takes is of a difference
    <= 0, so products vanish and nothing overflows."""
    rng = np.random.default_rng(5)
    q, k, v, _, beta = _tokens(rng, 2 * CHUNK + 9)
    g = -rng.uniform(0.0, 40.0, size=(q.shape[0], HEADS_V)).astype(np.float32).astype(np.float64)
    states = _states(rng, 1)
    out, final = _run_chunked(kernels, (q, k, v, g, beta), _starts([q.shape[0]]), states)
    want_out, want_state = delta_rule(q, k, v, g, beta, states[0])
    assert np.isfinite(out).all() and np.isfinite(final).all()
    np.testing.assert_allclose(out, want_out, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(final[0], want_state, atol=TOLERANCE, rtol=0)
