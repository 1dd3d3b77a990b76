"""Greedy generation and prefill logits equal transformers' on the same tiny checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_models import TINY_MODELS, load_oracle

from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over",
    "Beautiful is better than ugly. Explicit is better than implicit.",
]
NEW_TOKENS = 40


def _oracle_greedy(oracle, prompt_ids: list[int], new_tokens: int) -> list[int]:
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = oracle.generate(
            torch.tensor([prompt_ids]), max_new_tokens=new_tokens, do_sample=False
        )
    return out[0, len(prompt_ids) :].tolist()


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
def test_greedy_tokens_equal_transformers(name: str, tiny_model_dir) -> None:
    model_dir = tiny_model_dir(name)
    llm = LLM(model_dir, device="cpu", show_progress=False)
    oracle = load_oracle(model_dir)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    for output in llm.generate(PROMPTS, params):
        expected = _oracle_greedy(oracle, output.prompt_token_ids, NEW_TOKENS)
        assert output.outputs[0].token_ids == expected


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
def test_prefill_logits_within_1e_4_of_transformers(name: str, tiny_model_dir) -> None:
    model_dir = tiny_model_dir(name)
    llm = LLM(model_dir, device="cpu", show_progress=False)
    oracle = load_oracle(model_dir)
    ids = llm.tokenizer.encode(PROMPTS[2])
    runner = llm.runner
    runner.kv_cache.add_sequence(7)
    try:
        logits = runner.prefill([7], [ids], logit_positions=range(len(ids)))
    finally:
        runner.kv_cache.remove_sequence(7)
    with torch.no_grad():
        expected = oracle(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(logits - expected).max() <= 1e-4


def test_cli_generate_json_equals_transformers(tiny_model_dir, capsys) -> None:
    model_dir = tiny_model_dir("llama")
    code = cli_main(
        [
            "generate",
            "--model",
            str(model_dir),
            "--prompt",
            PROMPTS[0],
            "--max-tokens",
            "32",
            "--json",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    expected = _oracle_greedy(load_oracle(model_dir), result["prompt_token_ids"], 32)
    # The CLI stops at EOS (id 1) like transformers would; compare up to that point.
    if 1 in expected:
        expected = expected[: expected.index(1) + 1]
    assert result["token_ids"] == expected
    assert result["finish_reason"] in ("stop", "length")
    assert set(result["timings"]) >= {"prefill_seconds", "decode_tokens_per_second"}
