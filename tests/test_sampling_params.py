"""SamplingParams: vLLM's defaults, normalisation and validation messages."""

from __future__ import annotations

import math

import pytest

from vllm_tvm.runtime.sampling.params import (
    LOGPROBS_MODES,
    SamplingParams,
    check_logprobs_mode,
    check_requested_max_tokens,
)


def test_defaults_are_vllms() -> None:
    p = SamplingParams()
    assert (p.n, p.best_of, p.seed) == (1, None, None)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.temperature, p.top_p, p.top_k, p.min_p) == (1.0, 1.0, 0, 0.0)
    assert (p.max_tokens, p.min_tokens, p.logprobs, p.prompt_logprobs) == (16, 0, None, None)
    assert (p.stop, p.stop_token_ids, p.bad_words) == ([], [], [])
    assert (p.ignore_eos, p.include_stop_str_in_output) == (False, False)
    assert (p.detokenize, p.skip_special_tokens, p.spaces_between_special_tokens) == (
        True,
        True,
        True,
    )
    assert (p.logit_bias, p.allowed_token_ids) == (None, None)
    assert not p.greedy


@pytest.mark.parametrize(
    ("temperature", "greedy"), [(0.0, True), (1e-6, True), (1e-5, False), (0.7, False)]
)
def test_greedy_means_temperature_below_1e_5(temperature: float, greedy: bool) -> None:
    assert SamplingParams(temperature=temperature).greedy is greedy


def test_greedy_request_drops_top_p_top_k_min_p() -> None:
    p = SamplingParams(temperature=0.0, top_p=0.5, top_k=3, min_p=0.2)
    assert (p.top_p, p.top_k, p.min_p) == (1.0, 0, 0.0)


def test_random_request_keeps_top_p_top_k_min_p() -> None:
    p = SamplingParams(temperature=0.8, top_p=0.5, top_k=3, min_p=0.2)
    assert (p.top_p, p.top_k, p.min_p) == (0.5, 3, 0.2)


@pytest.mark.parametrize("max_tokens", [None, 0, -1])
def test_non_positive_max_tokens_means_unset(max_tokens: int | None) -> None:
    assert SamplingParams(max_tokens=max_tokens).max_tokens is None


@pytest.mark.parametrize("max_tokens", [0, -1])
def test_requested_max_tokens_below_one_is_refused_naming_it(max_tokens: int) -> None:
    with pytest.raises(ValueError, match=f"max_tokens must be at least 1, got {max_tokens}"):
        check_requested_max_tokens(max_tokens)


@pytest.mark.parametrize("max_tokens", [None, 1, 4096])
def test_requested_max_tokens_unset_or_positive_is_accepted(max_tokens: int | None) -> None:
    check_requested_max_tokens(max_tokens)


def test_stop_string_becomes_a_list() -> None:
    assert SamplingParams(stop="###").stop == ["###"]


def test_stop_token_ids_and_bad_words_are_deduplicated_in_order() -> None:
    p = SamplingParams(stop_token_ids=[5, 3, 5], bad_words=["b", "a", "b"])
    assert (p.stop_token_ids, p.bad_words) == ([5, 3], ["b", "a"])


def test_seed_minus_one_means_no_seed() -> None:
    assert SamplingParams(seed=-1).seed is None


@pytest.mark.parametrize(("given", "kept"), [(True, 1), (False, None), (-1, -1), (0, 0), (5, 5)])
def test_logprobs_counts_are_normalised(given: bool | int, kept: int | None) -> None:
    p = SamplingParams(logprobs=given, prompt_logprobs=given)
    assert (p.logprobs, p.prompt_logprobs) == (kept, kept)


def test_logit_bias_keys_may_be_strings_as_in_openai_json() -> None:
    assert SamplingParams(logit_bias={"12": 2, 7: -1.5}).logit_bias == {12: 2.0, 7: -1.5}


def test_integer_floats_are_accepted_as_numbers() -> None:
    assert SamplingParams(temperature=1, top_p=1).temperature == 1.0


def test_best_of_equal_to_n_is_a_no_op() -> None:
    assert SamplingParams(n=2, best_of=2).n == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1.0}, "temperature must be non-negative, got -1.0"),
        ({"temperature": -1}, "temperature must be non-negative, got -1.0"),
        ({"temperature": math.nan}, "temperature must be a finite number, got nan"),
        ({"temperature": "hot"}, "temperature must be a number, got 'hot'"),
        ({"top_p": 0.0}, "top_p must be in (0, 1], got 0.0"),
        ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
        ({"top_k": -2}, "top_k must be 0 or -1 (disable), or at least 1, got -2"),
        ({"top_k": 1.5}, "top_k must be an integer, got 1.5"),
        ({"min_p": 1.5}, "min_p must be in [0, 1], got 1.5"),
        ({"presence_penalty": 3}, "presence_penalty must be in [-2, 2], got 3.0"),
        ({"frequency_penalty": -2.5}, "frequency_penalty must be in [-2, 2], got -2.5"),
        ({"repetition_penalty": 0.0}, "greater than zero, got 0.0"),
        ({"repetition_penalty": math.inf}, "greater than zero, got inf"),
        ({"n": 0}, "n must be at least 1, got 0"),
        ({"n": True}, "n must be an integer, got True"),
        ({"n": 2, "temperature": 0.0}, "n must be 1 when using greedy sampling, got 2"),
        ({"best_of": 3}, "best_of=3"),
        ({"min_tokens": -1}, "min_tokens must be greater than or equal to 0, got -1"),
        ({"min_tokens": 20, "max_tokens": 10}, "less than or equal to max_tokens=10, got 20"),
        ({"logprobs": -2}, "logprobs must be non-negative or -1, got -2"),
        ({"prompt_logprobs": -5}, "prompt_logprobs must be non-negative or -1, got -5"),
        ({"stop": ["ok", ""]}, "stop must be non-empty strings, got ['ok', '']"),
        ({"stop": "x", "detokenize": False}, "only supported when detokenize is True"),
        ({"bad_words": [""]}, "bad_words must be non-empty strings, got ['']"),
        ({"stop_token_ids": [2, -1]}, "stop_token_ids must contain only non-negative"),
        ({"allowed_token_ids": []}, "allowed_token_ids must not be empty"),
        ({"allowed_token_ids": [1, -3]}, "got [-3]"),
        ({"logit_bias": {"abc": 1.0}}, "logit_bias keys must be integer token ids, got 'abc'"),
        ({"logit_bias": {-4: 1.0}}, "non-negative token ids, got -4"),
        ({"logit_bias": {4: math.inf}}, "logit_bias[4] must be a finite number, got inf"),
        ({"seed": 1.5}, "seed must be an integer, got 1.5"),
    ],
)
def test_invalid_values_are_rejected_with_the_value_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"logit_bias": {3: 1.0, 10: 1.0}}, "token_id(s) [10] in logit_bias"),
        ({"allowed_token_ids": [11, 2]}, "token_id(s) [11] in allowed_token_ids"),
        ({"stop_token_ids": [12]}, "token_id(s) [12] in stop_token_ids"),
        ({"logprobs": 6}, "Requested sample logprobs of 6, which is greater than max allowed: 5"),
        ({"logprobs": -1}, "Requested sample logprobs of 10, which is greater than max"),
        ({"prompt_logprobs": 7}, "Requested prompt logprobs of 7"),
    ],
)
def test_verify_for_vocab_names_out_of_range_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs).verify_for_vocab(vocab_size=10, max_logprobs=5)
    assert message in str(info.value)


def test_verify_for_vocab_lists_a_few_out_of_range_ids_and_counts_the_rest() -> None:
    bias = {token: 1.0 for token in range(10, 100_010)}
    with pytest.raises(ValueError) as info:
        SamplingParams(logit_bias=bias).verify_for_vocab(vocab_size=10)
    message = str(info.value)
    assert "token_id(s) [10, 11, 12, 13, 14, 15, 16, 17, ... (99992 more)]" in message
    assert len(message) < 200


def test_verify_for_vocab_accepts_whole_vocab_logprobs_without_a_cap() -> None:
    SamplingParams(logprobs=-1, prompt_logprobs=-1).verify_for_vocab(vocab_size=10)


_FAKE_VOCAB = {
    "bad": [5],
    " bad": [7],
    "two words": [1, 2],
    " two words": [3, 2],
    "split": [8, 9],
    " split": [4],
}


def _fake_encode(text: str) -> list[int]:
    return _FAKE_VOCAB.get(text, [])


def test_bad_words_are_encoded_with_and_without_a_leading_space() -> None:
    p = SamplingParams(bad_words=["bad", "  two words"])
    assert p.encode_bad_words(_fake_encode) == [[5], [7], [1, 2], [3, 2]]


def test_spaced_bad_word_of_another_length_is_not_added() -> None:
    assert SamplingParams(bad_words=["split"]).encode_bad_words(_fake_encode) == [[8, 9]]


def test_bad_word_that_encodes_to_nothing_is_rejected() -> None:
    with pytest.raises(ValueError, match="'unknown'"):
        SamplingParams(bad_words=["unknown"]).encode_bad_words(_fake_encode)


@pytest.mark.parametrize("mode", LOGPROBS_MODES)
def test_the_four_logprobs_modes_are_accepted(mode: str) -> None:
    assert check_logprobs_mode(mode) == mode


def test_unknown_logprobs_mode_lists_the_supported_ones() -> None:
    with pytest.raises(ValueError) as info:
        check_logprobs_mode("logits")
    assert str(info.value) == (
        "unsupported logprobs_mode 'logits'; supported: raw_logprobs, raw_logits, "
        "processed_logprobs, processed_logits"
    )


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"top_k": 2**63}, "top_k"),
        ({"seed": 2**63}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
        ({"n": 2**64}, "n"),
        ({"min_tokens": 2**70}, "min_tokens"),
        ({"max_tokens": 2**63}, "max_tokens"),
        ({"logprobs": 2**63}, "logprobs"),
        ({"stop_token_ids": [1, 2**64]}, "stop_token_ids"),
        ({"allowed_token_ids": [2**63]}, "allowed_token_ids"),
        ({"logit_bias": {str(2**64): 1.0}}, "logit_bias keys"),
    ],
)
def test_integers_beyond_int64_are_refused_by_name(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be within the signed 64-bit range"):
        SamplingParams(**kwargs)


def test_the_int64_extremes_themselves_are_accepted() -> None:
    p = SamplingParams(top_k=2**63 - 1, seed=-(2**63), min_tokens=0)
    assert (p.top_k, p.seed) == (2**63 - 1, -(2**63))
