"""Requests through the engine: seeds, n > 1, logprobs against transformers, stop rules,
admission, aborts and failures."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from engine_helpers import GREEDY, prompts_of_lengths, token_ids
from tiny_models import load_oracle

from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.engine.intake import PromptTooLongError
from vllm_tvm.runtime.sampling.params import SamplingParams


def _oracle_log_softmax(model_dir, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        logits = load_oracle(model_dir).eval()(torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.double(), dim=-1).numpy()


def test_seeded_request_gives_the_same_tokens_alone_and_in_a_batch(make_llm) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [12, 30, 7, 19])
    seeded = SamplingParams(temperature=1.0, seed=1234, max_tokens=16, ignore_eos=True)
    others = SamplingParams(temperature=0.8, max_tokens=10, ignore_eos=True)
    alone = token_ids(llm.generate(prompts[0], seeded))[0]
    batch = llm.generate(prompts, [seeded, others, others, others])
    assert batch[0].outputs[0].token_ids == alone


def test_n_completions_are_seeded_seed_plus_index(make_llm) -> None:
    llm = make_llm()
    prompt = prompts_of_lengths(llm, [15])[0]
    params = SamplingParams(n=3, temperature=1.0, seed=77, max_tokens=12, ignore_eos=True)
    together = llm.generate(prompt, params)[0]
    assert [c.index for c in together.outputs] == [0, 1, 2]
    for index, completion in enumerate(together.outputs):
        single = SamplingParams(temperature=1.0, seed=77 + index, max_tokens=12, ignore_eos=True)
        assert completion.token_ids == token_ids(llm.generate(prompt, single))[0]
    assert len({tuple(c.token_ids) for c in together.outputs}) == 3


def test_chunked_prompt_logprobs_equal_transformers(make_llm, tiny_model_dir) -> None:
    llm = make_llm(max_num_batched_tokens=16)
    prompt = prompts_of_lengths(llm, [45])[0]
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=2)
    output = llm.generate(prompt, params)[0]
    expected = _oracle_log_softmax(tiny_model_dir("llama"), prompt)
    entries = output.prompt_logprobs
    assert entries is not None and len(entries) == len(prompt) and entries[0] is None
    for position, entry in enumerate(entries[1:], start=1):
        assert entry.token_id == prompt[position]
        assert entry.logprob == pytest.approx(expected[position - 1, prompt[position]], abs=1e-4)
        best = np.argsort(-expected[position - 1], kind="stable")[:2]
        assert list(entry.top_token_ids) == list(best)


def test_sample_logprobs_equal_transformers(make_llm, tiny_model_dir) -> None:
    llm = make_llm()
    prompt = prompts_of_lengths(llm, [20])[0]
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=3)
    completion = llm.generate(prompt, params)[0].outputs[0]
    full = prompt + completion.token_ids
    expected = _oracle_log_softmax(tiny_model_dir("llama"), full)
    assert completion.logprobs is not None and len(completion.logprobs) == 8
    for step, entry in enumerate(completion.logprobs):
        row = expected[len(prompt) - 1 + step]
        assert entry.rank == 1
        assert entry.logprob == pytest.approx(row[entry.token_id], abs=1e-4)
        assert len(entry.top_token_ids) == 3
    total = sum(
        row[token]
        for row, token in zip(expected[len(prompt) - 1 :], completion.token_ids, strict=False)
    )
    assert completion.cumulative_logprob == pytest.approx(total, abs=1e-3)


def test_raw_logits_mode_reports_the_model_logits(make_llm, tiny_model_dir) -> None:
    llm = make_llm(logprobs_mode="raw_logits")
    prompt = prompts_of_lengths(llm, [20])[0]
    params = SamplingParams(temperature=0.0, max_tokens=1, logprobs=0)
    entry = llm.generate(prompt, params)[0].outputs[0].logprobs[0]
    with torch.no_grad():
        logits = load_oracle(tiny_model_dir("llama"))(torch.tensor([prompt])).logits[0, -1]
    assert entry.logprob == pytest.approx(float(logits[entry.token_id]), abs=1e-4)


def test_stop_token_id_ends_the_completion_at_its_first_occurrence(make_llm) -> None:
    llm = make_llm()
    prompt = prompts_of_lengths(llm, [10])[0]
    free_run = token_ids(llm.generate(prompt, GREEDY))[0]
    stop_id = free_run[3]
    params = SamplingParams(
        temperature=0.0, max_tokens=12, ignore_eos=True, stop_token_ids=[stop_id]
    )
    completion = llm.generate(prompt, params)[0].outputs[0]
    assert completion.token_ids == free_run[: free_run.index(stop_id) + 1]
    assert (completion.finish_reason, completion.stop_reason) == ("stop", stop_id)


def test_generation_config_eos_ids_stop_the_completion(make_llm, tiny_model_dir, tmp_path) -> None:
    model_dir = tmp_path / "with_generation_config"
    shutil.copytree(tiny_model_dir("llama"), model_dir)
    plain = make_llm()
    prompt = prompts_of_lengths(plain, [10])[0]
    free_run = token_ids(plain.generate(prompt, SamplingParams(temperature=0.0, max_tokens=12)))[0]
    extra_eos = free_run[2]
    (model_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, extra_eos]}))
    llm = LLM(model_dir, show_progress=False)
    completion = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=12))[0].outputs[0]
    assert completion.token_ids == free_run[: free_run.index(extra_eos) + 1]
    assert (completion.finish_reason, completion.stop_reason) == ("stop", extra_eos)
    assert llm.engine.block_manager.num_used_blocks == 0


def test_generate_without_params_uses_the_generation_config_defaults(
    make_llm, tiny_model_dir, tmp_path
) -> None:
    model_dir = tmp_path / "with_sampling_defaults"
    shutil.copytree(tiny_model_dir("llama"), model_dir)
    defaults = {"temperature": 0.0, "max_new_tokens": 5}
    (model_dir / "generation_config.json").write_text(json.dumps(defaults))
    plain = make_llm()
    prompt = prompts_of_lengths(plain, [10])[0]
    explicit = plain.generate(prompt, SamplingParams(temperature=0.0, max_tokens=5))[0]
    llm = LLM(model_dir, show_progress=False)
    assert llm.generate(prompt)[0].outputs[0].token_ids == explicit.outputs[0].token_ids


def test_nonpositive_max_tokens_runs_to_the_context_limit(make_llm) -> None:
    llm = make_llm(max_model_len=40)
    prompt = prompts_of_lengths(llm, [30])[0]
    completion = llm.generate(
        prompt, SamplingParams(temperature=0.0, max_tokens=-1, ignore_eos=True)
    )
    assert len(completion[0].outputs[0].token_ids) == 10
    assert completion[0].outputs[0].finish_reason == "length"


def test_prompt_at_the_length_limit_is_refused_naming_both_lengths(make_llm) -> None:
    llm = make_llm(max_model_len=32)
    for length in (32, 40):
        prompt = prompts_of_lengths(llm, [length])[0]
        with pytest.raises(PromptTooLongError, match=rf"length {length}\).*length of 32"):
            llm.generate(prompt, GREEDY)
    assert not llm.engine.has_unfinished


def test_one_refused_prompt_queues_none_of_the_batch(make_llm) -> None:
    llm = make_llm(max_model_len=32)
    prompts = prompts_of_lengths(llm, [5, 33, 6])
    with pytest.raises(PromptTooLongError):
        llm.generate(prompts, GREEDY)
    assert not llm.engine.has_unfinished


def test_failing_request_ends_with_error_and_the_others_finish(make_llm) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [9, 14, 11])
    expected = token_ids(llm.generate(prompts, GREEDY))
    # Only EOS (id 1) is allowed, and EOS is masked until 3 tokens exist: nothing to sample.
    impossible = SamplingParams(temperature=0.0, allowed_token_ids=[1], min_tokens=3)
    outputs = llm.generate(prompts, [GREEDY, impossible, GREEDY])
    assert outputs[1].outputs[0].finish_reason == "error"
    assert "no token left" in (outputs[1].error or "")
    assert token_ids([outputs[0], outputs[2]]) == [expected[0], expected[2]]


def test_aborted_request_finishes_with_abort_and_the_other_completes(make_llm) -> None:
    llm = make_llm()
    engine = llm.engine
    first, second = prompts_of_lengths(llm, [9, 14])
    engine.add_request("a", first, GREEDY, output_kind="final_only")
    engine.add_request("b", second, GREEDY, output_kind="final_only")
    outputs = [out for _ in range(3) for out in engine.step()]
    assert engine.abort_request("a")
    while engine.has_unfinished:
        outputs.extend(engine.step())
    by_id = {out.request_id: out for out in outputs}
    assert by_id["a"].finished and by_id["a"].outputs[0].finish_reason == "abort"
    assert by_id["b"].outputs[0].token_ids == token_ids(llm.generate(second, GREEDY))[0]


def test_aborting_a_waiting_request_frees_it_and_unknown_ids_are_refused(make_llm) -> None:
    llm = make_llm()
    engine = llm.engine
    engine.add_request("waiting", prompts_of_lengths(llm, [9])[0], GREEDY)
    assert engine.abort_request("waiting")
    assert not engine.abort_request("waiting")
    outputs = engine.step()
    assert [(o.request_id, o.outputs[0].finish_reason) for o in outputs] == [("waiting", "abort")]


def test_stream_deltas_add_up_to_the_generated_output(make_llm) -> None:
    llm = make_llm()
    prompt = "Beautiful is better than"
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    deltas = list(llm.stream(prompt, params))
    whole = llm.generate(prompt, params)[0].outputs[0]
    assert deltas[-1].finished and all(not d.finished for d in deltas[:-1])
    assert "".join(d.outputs[0].text for d in deltas) == whole.text
    assert [t for d in deltas for t in d.outputs[0].token_ids] == whole.token_ids


def test_cli_generate_stream_prints_the_generated_text(make_llm, tiny_model_dir, capsys) -> None:
    prompt = "Beautiful is better than"
    expected = make_llm().generate(prompt, SamplingParams(temperature=0.0, max_tokens=8))
    argv = ["generate", "--model", str(tiny_model_dir("llama")), "--prompt", prompt]
    assert cli_main([*argv, "--max-tokens", "8", "--stream"]) == 0
    assert capsys.readouterr().out == expected[0].outputs[0].text + "\n"


def test_abandoned_stream_aborts_its_request(make_llm) -> None:
    llm = make_llm()
    params = SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True)
    stream = llm.stream("Beautiful is better than", params)
    next(stream)
    stream.close()
    assert llm.engine.block_manager.num_used_blocks == 0
    llm.engine.step()  # hands out the abort output
