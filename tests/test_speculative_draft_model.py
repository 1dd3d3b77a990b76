"""Speculative decoding with a draft model never changes what the engine outputs: greedy
tokens equal plain decoding (batched, preempted, with prefix-cache hits), whether the draft
is the target itself (every draft accepted: the plumbing of draft KV, catch-up and rollback
is exact) or another random model (drafts mostly rejected, so the draft cache rolls back at
every step); sampled outputs follow the plain distribution with a draft drawing from its own
distribution (chi-square); and a draft that cannot draft for the target is refused by
name."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from engine_helpers import prompts_of_lengths, token_ids
from speculative_scenarios import greedy_tokens_unchanged, sampling_follows_plain
from test_speculative_engine import MIXED_LENGTHS

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.resolution_memo import remembered_artifact
from vllm_tvm.entrypoints.resolve import resolve_artifact
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.speculative.config import SpeculativeConfig
from vllm_tvm.runtime.speculative.draft_runner import check_same_tokenizer, load_draft_runner

TARGET = "llama"
OTHER_DRAFT = "llama_linear_rope_mha"
"""A draft with the target's tokenizer and other random weights (and shapes)."""


def draft_config(tiny_model_dir, name: str, k: int = 3) -> dict:
    return {"model": str(tiny_model_dir(name)), "num_speculative_tokens": k}


def assert_draft_cache_empty(llm) -> None:
    """Every sequence ended: the draft model holds no KV sequence and every page is free."""
    draft = llm.engine.speculator.draft
    config = draft.runner.kv_config
    assert draft.num_sequences == 0
    assert (
        draft.runner.kv_cache.available_pages() == config.max_total_seq_len // config.page_size + 1
    )


def test_the_target_as_its_own_draft_is_always_accepted(make_llm, tiny_model_dir) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    plain = make_llm(TARGET)
    prompts = prompts_of_lengths(plain, MIXED_LENGTHS)
    expected = token_ids(plain.generate(prompts, params))
    speculative = make_llm(TARGET, speculative_config=draft_config(tiny_model_dir, TARGET))
    assert token_ids(speculative.generate(prompts, params)) == expected
    stats = speculative.engine.metrics.snapshot()
    assert stats.spec_decode_num_draft_tokens > 0
    assert stats.spec_decode_num_accepted_tokens == stats.spec_decode_num_draft_tokens
    assert stats.mean_acceptance_length > 3
    assert_draft_cache_empty(speculative)


def test_prompts_longer_than_the_draft_chunk_catch_up_in_pieces(make_llm, tiny_model_dir) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    plain = make_llm(TARGET)
    prompts = prompts_of_lengths(plain, [45, 23, 60, 5])
    expected = token_ids(plain.generate(prompts, params))
    config = draft_config(tiny_model_dir, TARGET)
    chunked = make_llm(TARGET, max_num_batched_tokens=16, speculative_config=config)
    assert chunked.engine.speculator.draft.runner.kv_config.prefill_chunk_size == 16
    assert token_ids(chunked.generate(prompts, params)) == expected
    stats = chunked.engine.metrics.snapshot()
    assert 0 < stats.spec_decode_num_accepted_tokens == stats.spec_decode_num_draft_tokens
    assert_draft_cache_empty(chunked)


def test_another_draft_model_changes_no_greedy_token(make_llm, tiny_model_dir) -> None:
    plain = make_llm(TARGET, block_size=16)
    config = draft_config(tiny_model_dir, OTHER_DRAFT, k=4)
    speculative = make_llm(TARGET, block_size=16, speculative_config=config)
    greedy_tokens_unchanged(plain, speculative)
    assert_draft_cache_empty(speculative)


def test_preempted_with_a_draft_model_equals_no_speculation(make_llm, tiny_model_dir) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    plain = make_llm(TARGET)
    prompts = prompts_of_lengths(plain, [20, 18, 22, 19])
    expected = token_ids(plain.generate(prompts, params))
    config = draft_config(tiny_model_dir, TARGET)
    tight = make_llm(TARGET, block_size=16, num_blocks=8, speculative_config=config)
    assert token_ids(tight.generate(prompts, params)) == expected
    stats = tight.engine.metrics.snapshot()
    assert stats.num_preemptions > 0 and stats.spec_decode_num_accepted_tokens > 0
    assert_draft_cache_empty(tight)


@pytest.mark.parametrize("draft", [TARGET, OTHER_DRAFT])
def test_sampled_outputs_with_a_draft_distribution_follow_plain_sampling(
    draft: str, make_llm, tiny_model_dir
) -> None:
    plain = make_llm(TARGET, seed=1)
    speculative = make_llm(TARGET, seed=2, speculative_config=draft_config(tiny_model_dir, draft))
    # the draft samples from its full softmax, the target keeps its top 2: some drafts fall
    # outside and are rejected (residual draws), and with the target as draft most are not
    sampling_follows_plain(plain, speculative)
    stats = speculative.engine.metrics.snapshot()
    if draft == TARGET:
        assert stats.spec_decode_num_accepted_tokens > 0


def _artifact_copy(artifact: Path, tmp_path: Path, **changes) -> Path:
    """A copy of `artifact` whose manifest says `changes` (nothing compiled)."""
    copy = tmp_path / "draft_artifact"
    shutil.copytree(artifact, copy)
    manifest = json.loads((artifact / "manifest.json").read_text())
    for key, value in changes.items():
        if key == "vocab_size":
            manifest["runtime"]["vocab_size"] = value
        else:
            manifest[key] = value
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dtype": "float16"}, "built with dtype 'float16', the target with 'float32'"),
        ({"target": "cuda -arch=sm_90a"}, "built with target 'cuda -arch=sm_90a'"),
        ({"vocab_size": 1000}, "has a vocabulary of 1000 tokens"),
    ],
)
def test_a_draft_built_otherwise_is_refused_by_name(
    changes: dict, message: str, make_llm, tiny_model_dir, tmp_path: Path
) -> None:
    target = make_llm(TARGET)
    built = resolve_artifact(CompileOptions(tiny_model_dir(TARGET)), show_progress=False)
    artifact = _artifact_copy(built, tmp_path, **changes)
    config = SpeculativeConfig(
        "draft_model", 2, model=str(tiny_model_dir(TARGET)), draft_artifact=str(artifact)
    )
    with pytest.raises(ValueError, match=message):
        load_draft_runner(config, target.runner, target.model_path, "cpu", 4, 512, False)


def test_a_draft_with_another_tokenizer_is_refused_by_name(tiny_model_dir, tmp_path) -> None:
    target = tiny_model_dir(TARGET)
    draft = tmp_path / "draft"
    shutil.copytree(target, draft)
    tokenizer = json.loads((draft / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[5:7]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (draft / "tokenizer.json").write_text(json.dumps(tokenizer))
    check_same_tokenizer(tiny_model_dir(OTHER_DRAFT), target)
    with pytest.raises(ValueError, match=r"tokenizer .* differs from the target's"):
        check_same_tokenizer(draft, target)
    (draft / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="has no tokenizer"):
        check_same_tokenizer(draft, target)


def test_generate_takes_a_draft_model_on_the_command_line(make_llm, tiny_model_dir, capsys) -> None:
    from vllm_tvm.cli.main import main

    model = tiny_model_dir(TARGET)
    expected = make_llm().generate("hello world", SamplingParams(temperature=0.0, max_tokens=8))
    spec = json.dumps(draft_config(tiny_model_dir, OTHER_DRAFT))
    arguments = ["--prompt", "hello world", "--max-tokens", "8", "--temperature", "0", "--json"]
    assert main(["generate", "--model", str(model), *arguments, "--speculative-config", spec]) == 0
    generated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert generated["token_ids"] == expected[0].outputs[0].token_ids


def test_a_draft_still_to_resolve_keeps_the_compiler_loadable(tiny_model_dir, monkeypatch) -> None:
    """The target's artifact is built, the draft's may not be: TVM keeps its compiler."""
    from vllm_tvm.cli import preflight
    from vllm_tvm.runtime.engine.args import EngineArgs

    model = tiny_model_dir(TARGET)
    resolve_artifact(CompileOptions(model), show_progress=False)  # built and remembered
    monkeypatch.setenv(preflight.RUNTIME_ONLY_ENV, "0")  # so that teardown restores it
    monkeypatch.delenv(preflight.RUNTIME_ONLY_ENV)
    monkeypatch.delitem(sys.modules, "tvm")
    config = draft_config(tiny_model_dir, OTHER_DRAFT)
    engine = EngineArgs(model=str(model), speculative_config=config)
    engine = replace(engine, artifact=remembered_artifact(engine.compile_options))
    preflight.select_runtime_library(engine)
    assert engine.artifact is not None
    assert preflight.RUNTIME_ONLY_ENV not in os.environ


def test_a_benchmark_engine_gets_the_draft_built_like_its_target(tiny_model_dir) -> None:
    from vllm_tvm.benchmarking.config import BenchConfig
    from vllm_tvm.benchmarking.engine_setup import bench_engine_args, resolve_bench_config

    model = tiny_model_dir(TARGET)
    config = BenchConfig.from_options(
        model, device="cpu", speculative_config=draft_config(tiny_model_dir, OTHER_DRAFT)
    )
    config = resolve_bench_config(config)
    args = bench_engine_args(config, resolve_artifact(CompileOptions(model), False), 16)
    draft = resolve_artifact(CompileOptions(tiny_model_dir(OTHER_DRAFT)), False)
    assert args.speculative_config.draft_artifact == str(draft)


def test_a_failing_draft_forward_costs_drafts_not_tokens(make_llm, tiny_model_dir) -> None:
    """The draft cache starts afresh after a failed draft forward, and the step runs
    without drafts: outputs stay those of plain decoding."""
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    plain = make_llm(TARGET)
    prompts = prompts_of_lengths(plain, [12, 30])
    expected = token_ids(plain.generate(prompts, params))
    speculative = make_llm(TARGET, speculative_config=draft_config(tiny_model_dir, TARGET))
    runner = speculative.engine.speculator.draft.runner
    decode, failures = runner.decode, []

    def decode_failing_once(*arguments):
        if not failures:
            failures.append(arguments)
            raise RuntimeError("draft decode failed")
        return decode(*arguments)

    runner.decode = decode_failing_once
    assert token_ids(speculative.generate(prompts, params)) == expected
    stats = speculative.engine.metrics.snapshot()
    assert failures and stats.spec_decode_num_accepted_tokens > 0
    assert_draft_cache_empty(speculative)
