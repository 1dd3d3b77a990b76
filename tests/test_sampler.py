"""Sampler: vLLM v1's stages, seeding, greedy and logprobs, each checked against a formula
recomputed here (torch is the oracle for softmax / log_softmax / topk)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import (
    Sampler,
    SamplingContext,
    TokenLogprobs,
    make_generator,
    prompt_logprobs,
)

VOCAB = 12


def _logits(rows: int, seed: int = 0, vocab: int = VOCAB) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 2.0, size=(rows, vocab)).astype(np.float32)


def _ctx(
    prompt: list[int] | None = None, output: list[int] | None = None, **kwargs
) -> SamplingContext:
    ctx = SamplingContext.for_request(SamplingParams(**kwargs), prompt or [])
    ctx.output_token_ids.extend(output or [])
    return ctx


def _full_row(entry: TokenLogprobs | None) -> np.ndarray:
    """The whole-vocab vector a logprobs=-1 entry carries, back in token-id order."""
    assert entry is not None
    row = np.empty(len(entry.top_token_ids), dtype=np.float64)
    row[entry.top_token_ids] = entry.top_logprobs
    return row


def _processed(logits: np.ndarray, ctx: SamplingContext, eos: tuple[int, ...] = ()) -> np.ndarray:
    """The processed logits of one request, read back through logprobs_mode=processed_logits."""
    ctx.params.logprobs = -1
    out = Sampler("processed_logits", eos_token_ids=eos, seed=0).sample(logits[None, :], [ctx])
    return _full_row(out.logprobs[0])


# --- greedy and seeding -------------------------------------------------------------------


def test_greedy_takes_the_argmax_of_each_row() -> None:
    logits = _logits(4)
    out = Sampler().sample(logits, [_ctx(temperature=0.0) for _ in range(4)])
    assert out.token_ids.tolist() == torch.from_numpy(logits).argmax(dim=1).tolist()


def test_greedy_ignores_the_seed_and_leaves_the_generator_untouched() -> None:
    logits = _logits(1)
    first, second = _ctx(temperature=0.0, seed=1), _ctx(temperature=0.0, seed=2)
    assert first.generator is not None
    state_before = first.generator.bit_generator.state
    tokens = [Sampler().sample(logits, [c]).token_ids[0] for c in (first, second)]
    assert tokens[0] == tokens[1] == logits[0].argmax()
    assert first.generator.bit_generator.state == state_before


def _seeded_run(seed: int, steps: int, batch_builder) -> list[int]:
    """Tokens of one seeded request over `steps`, with `batch_builder` placing it in a batch."""
    target = _ctx(seed=seed, temperature=1.0)
    sampler = Sampler(seed=123)
    tokens = []
    for step in range(steps):
        contexts, row = batch_builder(target, step)
        logits = _logits(len(contexts), seed=1000 + step)
        logits[row] = _logits(1, seed=step)[0]
        token = int(sampler.sample(logits, contexts).token_ids[row])
        target.output_token_ids.append(token)
        tokens.append(token)
    return tokens


def test_same_seed_reproduces_the_same_tokens() -> None:
    alone = lambda target, step: ([target], 0)  # noqa: E731
    assert _seeded_run(7, 30, alone) == _seeded_run(7, 30, alone)


def test_seeded_tokens_do_not_depend_on_batch_composition() -> None:
    def alone(target, step):
        return [target], 0

    def crowded(target, step):
        others = [_ctx(temperature=0.9), _ctx(seed=step, top_k=3), _ctx(temperature=0.0)]
        row = step % 4
        return [*others[:row], target, *others[row:]], row

    assert _seeded_run(7, 30, alone) == _seeded_run(7, 30, crowded)


def test_different_seeds_give_different_tokens() -> None:
    alone = lambda target, step: ([target], 0)  # noqa: E731
    assert _seeded_run(7, 30, alone) != _seeded_run(8, 30, alone)


def test_sampler_seed_makes_unseeded_requests_reproducible() -> None:
    logits = np.zeros((64, VOCAB), dtype=np.float32)
    runs = [Sampler(seed=5).sample(logits, [_ctx() for _ in range(64)]) for _ in range(2)]
    assert runs[0].token_ids.tolist() == runs[1].token_ids.tolist()


def test_any_integer_seed_makes_a_generator() -> None:
    assert make_generator(-3).random() != make_generator(3).random()


# --- masks --------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_allowed_token_ids_leave_only_those_tokens(temperature: float) -> None:
    logits = np.tile(np.arange(VOCAB, dtype=np.float32) * 3, (200, 1))
    contexts = [_ctx(allowed_token_ids=[1, 2], temperature=temperature) for _ in range(200)]
    assert set(Sampler(seed=0).sample(logits, contexts).token_ids.tolist()) <= {1, 2}


def test_single_token_bad_word_is_always_banned() -> None:
    ctx = _ctx(temperature=0.0)
    ctx.bad_words_token_ids = [[4]]
    assert np.isneginf(_processed(_logits(1)[0], ctx)[4])


def test_multi_token_bad_word_bans_its_last_token_after_its_prefix() -> None:
    ctx = _ctx(output=[9, 2, 3], temperature=0.0)
    ctx.bad_words_token_ids = [[2, 3, 6]]
    assert np.isneginf(_processed(_logits(1)[0], ctx)[6])


@pytest.mark.parametrize(
    ("prompt", "output"),
    [([], [3, 2]), ([2], [3]), ([], [3])],
    ids=["prefix-in-wrong-order", "prefix-split-with-prompt", "output-shorter-than-prefix"],
)
def test_multi_token_bad_word_is_allowed_without_its_prefix_in_the_output(
    prompt: list[int], output: list[int]
) -> None:
    logits = _logits(1)[0]
    ctx = _ctx(prompt=prompt, output=output, temperature=0.0)
    ctx.bad_words_token_ids = [[2, 3, 6]]
    assert _processed(logits, ctx)[6] == logits[6]


def test_bad_words_come_from_the_tokenizer_through_for_request() -> None:
    params = SamplingParams(bad_words=["x"], temperature=0.0)
    ctx = SamplingContext.for_request(params, [], encode=lambda text: {"x": [5]}.get(text, []))
    assert ctx.bad_words_token_ids == [[5]]


def test_bad_words_without_a_tokenizer_are_refused() -> None:
    with pytest.raises(ValueError, match="bad_words=\\['x'\\] need a tokenizer"):
        SamplingContext.for_request(SamplingParams(bad_words=["x"]), [])


def test_min_tokens_masks_stop_and_eos_ids_until_reached() -> None:
    logits = _logits(1)[0]
    ctx = _ctx(output=[1, 1], min_tokens=3, stop_token_ids=[5], temperature=0.0)
    row = _processed(logits, ctx, eos=(7,))
    assert np.isneginf(row[[5, 7]]).all()
    assert np.array_equal(np.delete(row, [5, 7]), np.delete(logits, [5, 7]))


def test_min_tokens_stops_masking_once_reached() -> None:
    logits = _logits(1)[0]
    ctx = _ctx(output=[1, 1, 1], min_tokens=3, stop_token_ids=[5], temperature=0.0)
    assert np.array_equal(_processed(logits, ctx, eos=(7,)), logits)


def test_min_tokens_changes_the_greedy_choice() -> None:
    logits = np.zeros((1, VOCAB), dtype=np.float32)
    logits[0, 7], logits[0, 3] = 10.0, 5.0
    ctx = _ctx(min_tokens=2, temperature=0.0)
    assert Sampler(eos_token_ids=[7]).sample(logits, [ctx]).token_ids[0] == 3


def test_a_row_with_nothing_left_to_sample_is_named() -> None:
    contexts = [_ctx(), _ctx(allowed_token_ids=[2], min_tokens=1, stop_token_ids=[2])]
    with pytest.raises(ValueError, match=r"batch row\(s\) \[1\] have no token left"):
        Sampler().sample(_logits(2), contexts)


# --- logit bias and penalties --------------------------------------------------------------


def test_logit_bias_adds_to_the_named_logits() -> None:
    logits = _logits(1)[0]
    row = _processed(logits, _ctx(logit_bias={2: 5.0, 9: -100.0}, temperature=0.0))
    expected = logits.astype(np.float64)
    expected[2] += 5.0
    expected[9] -= 100.0
    np.testing.assert_allclose(row, expected, rtol=1e-6)


def _penalised(logits, prompt, output, rep, freq, pres) -> np.ndarray:
    """vLLM's penalty formulas, recomputed in float64."""
    result = logits.astype(np.float64)
    counts = np.bincount(output, minlength=len(logits)).astype(np.float64)
    seen = (counts > 0) | (np.bincount(prompt, minlength=len(logits)) > 0)
    result[seen] = np.where(result[seen] > 0, result[seen] / rep, result[seen] * rep)
    return result - freq * counts - pres * (counts > 0)


@pytest.mark.parametrize(
    ("rep", "freq", "pres"),
    [(1.5, 0.0, 0.0), (0.7, 0.0, 0.0), (1.0, 0.4, 0.0), (1.0, 0.0, -0.8), (1.3, 0.5, 0.9)],
)
def test_penalties_follow_vllms_formulas(rep: float, freq: float, pres: float) -> None:
    logits = _logits(1, seed=3)[0]
    assert (logits > 0).any() and (logits < 0).any()
    prompt, output = [0, 1, 1, 2, 3], [3, 4, 4, 4, 5, 0]
    ctx = _ctx(
        prompt=prompt,
        output=output,
        repetition_penalty=rep,
        frequency_penalty=freq,
        presence_penalty=pres,
        temperature=0.0,
    )
    np.testing.assert_allclose(
        _processed(logits, ctx), _penalised(logits, prompt, output, rep, freq, pres), rtol=1e-6
    )


def test_frequency_and_presence_ignore_prompt_only_tokens() -> None:
    logits = _logits(1)[0]
    ctx = _ctx(prompt=[6], output=[1], frequency_penalty=1.0, presence_penalty=1.0, temperature=0.0)
    assert _processed(logits, ctx)[6] == logits[6]


def test_logit_bias_is_applied_before_the_repetition_penalty() -> None:
    logits = np.zeros(VOCAB, dtype=np.float32)
    logits[4] = -2.0
    ctx = _ctx(prompt=[4], logit_bias={4: 3.0}, repetition_penalty=2.0, temperature=0.0)
    assert _processed(logits, ctx)[4] == pytest.approx((-2.0 + 3.0) / 2.0)


# --- temperature, min_p, top_k, top_p as seen through processed logits ---------------------


def test_temperature_divides_the_logits() -> None:
    logits = _logits(1)[0]
    np.testing.assert_allclose(_processed(logits, _ctx(temperature=0.5)), logits / 0.5, rtol=1e-6)


def test_greedy_rows_are_not_temperature_scaled_beside_random_rows() -> None:
    logits = _logits(2)
    contexts = [_ctx(temperature=0.0, logprobs=-1), _ctx(temperature=0.5, logprobs=-1)]
    out = Sampler("processed_logits").sample(logits, contexts)
    np.testing.assert_array_equal(_full_row(out.logprobs[0]), logits[0])
    np.testing.assert_allclose(_full_row(out.logprobs[1]), logits[1] / 0.5, rtol=1e-6)


@pytest.mark.parametrize("top_k", [0, -1, VOCAB])
def test_top_k_of_zero_minus_one_or_the_vocab_keeps_every_token(top_k: int) -> None:
    assert np.isfinite(_processed(_logits(1)[0], _ctx(top_k=top_k))).all()


def test_top_k_masks_all_but_the_k_largest() -> None:
    logits = _logits(1)[0]
    row = _processed(logits, _ctx(top_k=4, temperature=0.8))
    kept = set(torch.topk(torch.from_numpy(logits), 4).indices.tolist())
    assert set(np.flatnonzero(np.isfinite(row)).tolist()) == kept
    np.testing.assert_allclose(row[list(kept)], logits[list(kept)] / 0.8, rtol=1e-6)


def test_min_p_masks_tokens_below_min_p_times_the_top_probability() -> None:
    logits = _logits(1, seed=5)[0]
    probs = torch.softmax(torch.from_numpy(logits).double() / 0.9, dim=0)
    kept = set(torch.nonzero(probs >= 0.1 * probs.max()).flatten().tolist())
    assert 1 < len(kept) < VOCAB
    row = _processed(logits, _ctx(min_p=0.1, temperature=0.9))
    assert set(np.flatnonzero(np.isfinite(row)).tolist()) == kept


def _top_p_kept(logits: np.ndarray, top_p: float) -> set[int]:
    """Tokens whose strictly more probable tokens hold less than top_p of the mass."""
    probs = torch.softmax(torch.from_numpy(logits).double(), dim=0).numpy()
    return {i for i in range(len(probs)) if probs[probs > probs[i]].sum() < top_p}


@pytest.mark.parametrize("top_p", [0.3, 0.6, 0.9])
def test_top_p_keeps_the_smallest_top_set_reaching_p(top_p: float) -> None:
    logits = _logits(1, seed=11)[0]
    row = _processed(logits, _ctx(top_p=top_p))
    assert set(np.flatnonzero(np.isfinite(row)).tolist()) == _top_p_kept(logits, top_p)


def test_top_p_always_keeps_the_most_likely_token() -> None:
    logits = np.array([5.0] + [0.0] * (VOCAB - 1), dtype=np.float32)
    row = _processed(logits, _ctx(top_p=0.01))
    assert np.flatnonzero(np.isfinite(row)).tolist() == [0]


# --- logprobs -------------------------------------------------------------------------------


def _one(mode: str, logits: np.ndarray, **kwargs) -> TokenLogprobs:
    out = Sampler(mode, seed=0).sample(logits[None, :], [_ctx(**kwargs)])
    assert out.logprobs[0] is not None
    assert out.logprobs[0].token_id == out.token_ids[0]
    return out.logprobs[0]


_PROCESSING = {"temperature": 0.6, "top_k": 5, "repetition_penalty": 1.4}


def test_raw_logprobs_are_the_log_softmax_of_the_model_logits() -> None:
    logits = _logits(1)[0]
    entry = _one("raw_logprobs", logits, logprobs=3, prompt=[0, 1], **_PROCESSING)
    oracle = torch.log_softmax(torch.from_numpy(logits), dim=0)
    top = torch.topk(oracle, 3)
    assert entry.top_token_ids.tolist() == top.indices.tolist()
    np.testing.assert_allclose(entry.top_logprobs, top.values.numpy(), rtol=1e-5)
    assert entry.logprob == pytest.approx(float(oracle[entry.token_id]), rel=1e-5)


def test_whole_vocab_raw_logprobs_normalise_to_one() -> None:
    entry = _one("raw_logprobs", _logits(1)[0], logprobs=-1, **_PROCESSING)
    assert len(entry.top_token_ids) == VOCAB
    assert np.exp(entry.top_logprobs.astype(np.float64)).sum() == pytest.approx(1.0, abs=1e-5)


def test_raw_logits_are_the_model_logits_untouched() -> None:
    logits = _logits(1)[0]
    entry = _one("raw_logits", logits, logprobs=-1, prompt=[0, 1], **_PROCESSING)
    np.testing.assert_array_equal(_full_row(entry), logits)


def test_processed_logits_are_after_temperature_and_top_k() -> None:
    logits = _logits(1)[0]
    entry = _one("processed_logits", logits, logprobs=-1, prompt=[0, 1], **_PROCESSING)
    expected = _penalised(logits, [0, 1], [], 1.4, 0.0, 0.0) / 0.6
    expected[np.argsort(-expected)[5:]] = -np.inf
    np.testing.assert_allclose(_full_row(entry), expected, rtol=1e-6)


def test_processed_logprobs_renormalise_over_the_kept_tokens() -> None:
    logits = _logits(1)[0]
    entry = _one("processed_logprobs", logits, logprobs=-1, prompt=[0, 1], **_PROCESSING)
    kept_logits = _penalised(logits, [0, 1], [], 1.4, 0.0, 0.0) / 0.6
    kept_logits[np.argsort(-kept_logits)[5:]] = -np.inf
    oracle = torch.log_softmax(torch.from_numpy(kept_logits), dim=0).numpy()
    np.testing.assert_allclose(_full_row(entry), oracle, rtol=1e-5)
    assert np.exp(entry.top_logprobs.astype(np.float64)).sum() == pytest.approx(1.0, abs=1e-5)


def test_rank_counts_tokens_at_least_as_likely_as_the_chosen_one() -> None:
    logits = _logits(1)[0]
    entries = [_one("raw_logits", logits, logprobs=0, seed=s) for s in range(20)]
    for entry in entries:
        assert entry.rank == int((logits >= logits[entry.token_id]).sum())
    assert {e.rank for e in entries} != {1}


def test_greedy_token_has_rank_one() -> None:
    assert _one("raw_logprobs", _logits(1)[0], logprobs=2, temperature=0.0).rank == 1


def test_zero_logprobs_gives_only_the_chosen_token() -> None:
    entry = _one("raw_logprobs", _logits(1)[0], logprobs=0)
    assert entry.top_token_ids.size == 0 and entry.top_logprobs.size == 0


def test_rows_without_logprobs_get_none() -> None:
    out = Sampler().sample(_logits(2), [_ctx(logprobs=2), _ctx()])
    assert out.logprobs[0] is not None and out.logprobs[1] is None


def test_each_row_gets_its_own_number_of_logprobs() -> None:
    out = Sampler().sample(_logits(3), [_ctx(logprobs=1), _ctx(logprobs=4), _ctx(logprobs=-1)])
    assert [len(e.top_token_ids) for e in out.logprobs if e is not None] == [1, 4, VOCAB]


# --- prompt logprobs -------------------------------------------------------------------------


def test_prompt_logprobs_score_each_token_with_the_previous_positions_logits() -> None:
    prompt = [3, 7, 1, 1, 9]
    logits = _logits(len(prompt))
    entries = prompt_logprobs(logits, prompt, num_logprobs=2)
    oracle = torch.log_softmax(torch.from_numpy(logits), dim=1)
    assert [e.token_id for e in entries] == prompt[1:]
    for position, entry in enumerate(entries):
        assert entry.logprob == pytest.approx(float(oracle[position, prompt[position + 1]]), 1e-5)
        top = torch.topk(oracle[position], 2)
        assert entry.top_token_ids.tolist() == top.indices.tolist()
        assert entry.rank == int((oracle[position] >= oracle[position, entry.token_id]).sum())


def test_prompt_logprobs_of_a_chunk_start_at_its_offset() -> None:
    prompt = [3, 7, 1, 1, 9]
    logits = _logits(len(prompt))
    whole = prompt_logprobs(logits, prompt, num_logprobs=1)
    chunk = prompt_logprobs(logits[2:4], prompt, num_logprobs=1, start=2)
    assert [(e.token_id, e.logprob) for e in chunk] == [(e.token_id, e.logprob) for e in whole[2:4]]


def test_whole_vocab_prompt_logprobs_normalise_to_one() -> None:
    entries = prompt_logprobs(_logits(3), [1, 2, 3], num_logprobs=-1)
    for entry in entries:
        assert np.exp(entry.top_logprobs.astype(np.float64)).sum() == pytest.approx(1.0, abs=1e-5)


def test_prompt_logprobs_reject_a_bad_count() -> None:
    with pytest.raises(ValueError, match="num_logprobs must be non-negative or -1, got -2"):
        prompt_logprobs(_logits(2), [1, 2], num_logprobs=-2)


# --- calling convention ---------------------------------------------------------------------


def test_logits_rows_must_match_the_contexts() -> None:
    with pytest.raises(ValueError, match=r"got shape \(3, 12\) for 2 contexts"):
        Sampler().sample(_logits(3), [_ctx(), _ctx()])


def test_the_callers_logits_are_not_modified() -> None:
    logits = _logits(2)
    before = logits.copy()
    Sampler().sample(logits, [_ctx(top_k=2, logit_bias={1: 3.0}), _ctx(temperature=0.0)])
    np.testing.assert_array_equal(logits, before)
