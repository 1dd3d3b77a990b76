"""Sampling on the device: the compiled `argmax` / `sample` functions against numpy and the
softmax they must follow, and the engine's choice between the device and the host path."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
import tvm
from device_sampling_helpers import chi_square, chi_square_limit, kept_distribution, tied_rows
from engine_helpers import GREEDY, prompts_of_lengths, token_ids

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import MANIFEST_NAME
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.entrypoints.resolve import resolve_artifact
from vllm_tvm.runtime.model.device_logits import DeviceLogits
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.sampling.device_sampling import DEVICE_SAMPLING_ENV, needs_host_row
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import SamplingContext

SEEDED = SamplingParams(temperature=0.9, top_p=0.9, top_k=40, seed=21, max_tokens=12)


@pytest.fixture(scope="module")
def runner(tiny_model_dir) -> ModelRunner:
    """The tiny llama's runner (vocabulary 512); its compiled sampling functions."""
    return LLM(tiny_model_dir("llama"), device="cpu", show_progress=False).runner


def _on_device(runner: ModelRunner, rows: np.ndarray) -> DeviceLogits:
    def to_device(array: np.ndarray) -> tvm.runtime.Tensor:
        return tvm.runtime.tensor(array, runner.device)

    return DeviceLogits(
        to_device(np.ascontiguousarray(rows, dtype=np.float32)),
        runner.vm["argmax"],
        runner.vm["sample"],
        to_device,
    )


def _sample(
    logits: DeviceLogits,
    keys: np.ndarray,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
) -> np.ndarray:
    rows = logits.shape[0]
    return logits.sample(
        np.full(rows, temperature),
        np.full(rows, top_k),
        np.full(rows, top_p),
        np.full(rows, min_p),
        keys,
    )


def _keys(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, count, dtype=np.uint64)


# ---- the compiled functions ----


def test_device_argmax_equals_numpy_argmax_on_model_logits(runner: ModelRunner) -> None:
    runner.kv_cache.add_sequence(0)
    runner.kv_cache.add_sequence(1)
    try:
        logits = runner.prefill_logits([0, 1], [list(range(5, 40)), [9, 8, 7]], range(38))
        decoded = runner.decode_logits([0, 1], [3, 4])
    finally:
        runner.kv_cache.remove_sequence(0)
        runner.kv_cache.remove_sequence(1)
    np.testing.assert_array_equal(logits.argmax(), logits.numpy().argmax(axis=1))
    np.testing.assert_array_equal(decoded.argmax(), decoded.numpy().argmax(axis=1))


def test_device_argmax_takes_the_first_of_tied_maxima(runner: ModelRunner) -> None:
    rows = tied_rows(runner.vocab_size)
    np.testing.assert_array_equal(_on_device(runner, rows).argmax(), rows.argmax(axis=1))


def test_temperature_zero_samples_the_first_maximum(runner: ModelRunner) -> None:
    rows = tied_rows(runner.vocab_size)
    tokens = _sample(_on_device(runner, rows), _keys(len(rows)), temperature=0.0)
    np.testing.assert_array_equal(tokens, rows.argmax(axis=1))


@pytest.mark.parametrize(
    "filters",
    [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}],
    ids=["top_k=1", "top_p=1e-6", "min_p=1"],
)
def test_a_filter_keeping_one_token_samples_the_argmax(runner: ModelRunner, filters) -> None:
    rows = np.random.default_rng(5).standard_normal((64, runner.vocab_size)).astype(np.float32)
    tokens = _sample(_on_device(runner, rows), _keys(64), temperature=1.5, **filters)
    np.testing.assert_array_equal(tokens, rows.argmax(axis=1))


def test_equal_keys_draw_equal_tokens_and_other_keys_others(runner: ModelRunner) -> None:
    row = np.random.default_rng(6).standard_normal(runner.vocab_size).astype(np.float32)
    logits = _on_device(runner, np.tile(row, (200, 1)))
    keys = _keys(200, seed=1)
    first = _sample(logits, keys, temperature=1.0, top_p=0.95)
    np.testing.assert_array_equal(_sample(logits, keys, temperature=1.0, top_p=0.95), first)
    assert len(set(first.tolist())) > 50  # a flat row: many distinct draws


@pytest.mark.parametrize(
    "filters",
    [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 20},
        {"temperature": 1.0, "top_p": 0.6},
        {"temperature": 1.3, "top_k": 50, "top_p": 0.9},
        {"temperature": 1.0, "min_p": 0.05},
    ],
    ids=["plain", "top_k", "top_p", "top_k+top_p", "min_p"],
)
def test_draws_follow_the_softmax_of_the_kept_tokens(runner: ModelRunner, filters) -> None:
    row = (np.random.default_rng(7).standard_normal(runner.vocab_size) * 2.5).astype(np.float32)
    draws = 6000
    tokens = _sample(_on_device(runner, np.tile(row, (draws, 1))), _keys(draws, 2), **filters)
    statistic, dof = chi_square(tokens, kept_distribution(row, **filters))
    assert statistic < chi_square_limit(dof)


def test_sample_refuses_parameters_of_the_wrong_length(runner: ModelRunner) -> None:
    logits = _on_device(runner, np.zeros((3, runner.vocab_size), np.float32))
    with pytest.raises(ValueError, match=r"temperature must have shape \(3,\)"):
        logits.sample(np.ones(2), np.zeros(3), np.ones(3), np.zeros(3), np.zeros(3))


# ---- which rows go where ----


@pytest.mark.parametrize(
    "overrides",
    [
        {"logprobs": 2},
        {"prompt_logprobs": 1},
        {"allowed_token_ids": [5, 6]},
        {"logit_bias": {5: 1.0}},
        {"min_tokens": 3},
        {"repetition_penalty": 1.1},
        {"frequency_penalty": 0.5},
        {"presence_penalty": -0.5},
    ],
    ids=lambda overrides: next(iter(overrides)),
)
def test_host_only_stages_keep_the_row_on_the_host(overrides) -> None:
    params = SamplingParams(temperature=0.8, top_p=0.9, **overrides)
    assert needs_host_row(SamplingContext.for_request(params, [1, 2, 3]))


def test_bad_words_keep_the_row_on_the_host() -> None:
    params = SamplingParams(temperature=0.8, bad_words=["no"])
    context = SamplingContext.for_request(params, [1, 2], encode=lambda text: [7, 8])
    assert needs_host_row(context)


def test_temperature_top_k_top_p_min_p_and_seed_stay_on_the_device() -> None:
    params = SamplingParams(temperature=0.7, top_k=5, top_p=0.8, min_p=0.1, seed=3)
    assert not needs_host_row(SamplingContext.for_request(params, [1, 2, 3]))


def test_min_tokens_keeps_the_host_path_only_until_reached() -> None:
    context = SamplingContext.for_request(SamplingParams(min_tokens=2), [1])
    context.output_token_ids.extend([4])
    assert needs_host_row(context)
    context.output_token_ids.extend([5])
    assert not needs_host_row(context)


def test_environment_zero_turns_device_sampling_off(make_llm, monkeypatch) -> None:
    monkeypatch.setenv(DEVICE_SAMPLING_ENV, "0")
    assert not make_llm().engine.device_sampling


# ---- the engine ----


@pytest.fixture
def host_copies(monkeypatch) -> Iterator[list[tuple[int, int]]]:
    """The shapes of the logits copied to the host while the test runs."""
    copies: list[tuple[int, int]] = []
    original = DeviceLogits.numpy

    def counted(self: DeviceLogits) -> np.ndarray:
        copies.append(self.shape)
        return original(self)

    monkeypatch.setattr(DeviceLogits, "numpy", counted)
    yield copies


def test_greedy_tokens_are_the_same_on_the_device_and_the_host(make_llm) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [12, 30, 7, 19, 4])
    on_device = token_ids(llm.generate(prompts, GREEDY))
    llm.engine.device_sampling = False
    assert token_ids(llm.generate(prompts, GREEDY)) == on_device


def test_greedy_generation_copies_no_logits_to_the_host(make_llm, host_copies) -> None:
    llm = make_llm()
    llm.generate(prompts_of_lengths(llm, [12, 30, 7]), GREEDY)
    assert host_copies == []


def test_random_sampling_copies_no_logits_to_the_host(make_llm, host_copies) -> None:
    llm = make_llm()
    llm.generate(prompts_of_lengths(llm, [12, 30]), [SEEDED, SamplingParams(temperature=1.0)])
    assert host_copies == []


def test_a_logprobs_request_copies_the_logits_it_needs(make_llm, host_copies) -> None:
    llm = make_llm()
    params = SamplingParams(temperature=0.0, max_tokens=4, logprobs=3, ignore_eos=True)
    outputs = llm.generate(prompts_of_lengths(llm, [12]), params)
    assert len(host_copies) == 4
    assert all(entry is not None for entry in outputs[0].outputs[0].logprobs)


def test_seeded_device_draws_repeat_alone_and_beside_host_rows(make_llm) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [15, 9, 22])
    alone = token_ids(llm.generate(prompts[0], SEEDED))[0]
    logprobs = SamplingParams(temperature=1.0, logprobs=1, max_tokens=8)
    batch = llm.generate(prompts, [SEEDED, logprobs, SamplingParams(temperature=1.0)])
    assert batch[0].outputs[0].token_ids == alone


def test_a_hook_sees_only_the_rows_it_constrains(make_llm) -> None:
    llm = make_llm()
    seen: list[str] = []

    class OnlyRequestA:
        def constrains(self, seq) -> bool:
            return seq.request_id == "a"

        def __call__(self, seqs, logits) -> None:
            seen.extend(seq.request_id for seq in seqs)

    llm.engine.logits_hooks.append(OnlyRequestA())
    for request_id, prompt in zip("ab", prompts_of_lengths(llm, [10, 14]), strict=True):
        llm.engine.add_request(request_id, prompt, GREEDY)
    while llm.engine.has_unfinished:
        llm.engine.step()
    assert seen == ["a"] * GREEDY.max_tokens


def test_a_plain_hook_keeps_every_row_on_the_host(make_llm, host_copies) -> None:
    llm = make_llm()
    seen: list[int] = []
    llm.engine.logits_hooks.append(lambda seqs, logits: seen.append(len(seqs)))
    llm.generate(prompts_of_lengths(llm, [10, 14]), GREEDY)
    assert sum(seen) == 2 * GREEDY.max_tokens
    assert host_copies


def test_an_artifact_without_sampling_functions_samples_on_the_host(make_llm, tmp_path) -> None:
    current = make_llm()
    old = tmp_path / "artifact"
    shutil.copytree(resolve_artifact(CompileOptions(current.model_path), False), old)
    manifest = json.loads((old / MANIFEST_NAME).read_text())
    manifest["functions"] = [f for f in manifest["functions"] if f not in ("argmax", "sample")]
    (old / MANIFEST_NAME).write_text(json.dumps(manifest))
    previous = make_llm(artifact=old)
    assert not previous.runner.can_sample_on_device
    prompts = prompts_of_lengths(current, [12, 20])
    assert token_ids(previous.generate(prompts, GREEDY)) == token_ids(
        current.generate(prompts, GREEDY)
    )
    current.engine.device_sampling = False  # the host path, whose draws an old artifact makes
    assert token_ids(previous.generate(prompts, SEEDED)) == token_ids(
        current.generate(prompts, SEEDED)
    )
