"""Gemma 2 with attention-logit soft-capping equals transformers (eager attention, fp32).

The tiny checkpoint's cap (3.0) is far below its raw attention scores, so the cap changes
the logits (asserted on the oracle itself); its sliding window (16) is shorter than the
prompts plus 40 new tokens, and prompts longer than the window run as several prefill
chunks. The cap's kernels: tests/test_attention_softcap_kernels.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import TinyModelSpec, make_tiny_model

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

CAP = 3.0
WINDOW = 16
SPEC = TinyModelSpec(
    "gemma2_attn_softcap",
    "Gemma2Config",
    {
        "head_dim": 16,
        "num_hidden_layers": 3,
        "sliding_window": WINDOW,
        "query_pre_attn_scalar": 24,
        "attn_logit_softcapping": CAP,
        "final_logit_softcapping": 30.0,
        "tie_word_embeddings": False,
    },
)
PROMPT_LENGTHS = (5, 23, 41)
NEW_TOKENS = 40


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(SPEC, tmp_path_factory.mktemp(SPEC.name))


@pytest.fixture(scope="module")
def llm(model_dir: Path) -> LLM:
    return LLM(model_dir, device="cpu", show_progress=False)


def _oracle(model_dir: Path, cap: float | None = CAP):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", attn_logit_softcapping=cap
    ).eval()


def _prompts(model_dir: Path) -> list[list[int]]:
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    return [[(3 + 29 * i + n) % (vocab - 2) + 2 for i in range(n)] for n in PROMPT_LENGTHS]


def _oracle_logits(oracle, prompt: list[int]) -> np.ndarray:
    with torch.no_grad():
        return oracle(torch.tensor([prompt])).logits[0].numpy()


def test_the_cap_changes_the_oracles_logits(model_dir: Path) -> None:
    prompt = _prompts(model_dir)[2]
    capped = _oracle_logits(_oracle(model_dir), prompt)
    uncapped = _oracle_logits(_oracle(model_dir, cap=None), prompt)
    assert np.abs(capped - uncapped).max() > 1.0


def test_chunked_prefill_logits_within_1e_4_of_transformers(llm: LLM, model_dir: Path) -> None:
    runner = llm.runner
    chunk = runner.kv_config.prefill_chunk_size
    prompt = _prompts(model_dir)[2]
    assert chunk <= WINDOW < len(prompt)
    rows = []
    runner.kv_cache.add_sequence(7)
    try:
        for start in range(0, len(prompt), chunk):
            part = prompt[start : start + chunk]
            rows.append(runner.prefill([7], [part], logit_positions=range(len(part))))
    finally:
        runner.kv_cache.remove_sequence(7)
    expected = _oracle_logits(_oracle(model_dir), prompt)
    assert np.abs(np.concatenate(rows) - expected).max() <= 1e-4


def test_greedy_tokens_equal_transformers_batched_and_sequential(llm: LLM, model_dir: Path) -> None:
    oracle = _oracle(model_dir)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    prompts = _prompts(model_dir)
    batched = [output.outputs[0].token_ids for output in llm.generate(prompts, params)]
    for prompt, tokens in zip(prompts, batched, strict=True):
        with torch.no_grad():
            expected = oracle.generate(
                torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False
            )[0, len(prompt) :]
        assert list(tokens) == expected.tolist()
        assert llm.generate([prompt], params)[0].outputs[0].token_ids == tokens


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
def test_soft_capped_gemma2_compiles_for_sm90a(model_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "artifact"
    arguments = ["compile", str(model_dir), "--target", "cuda", "--dtype", "bfloat16"]
    assert cli_main([*arguments, "--output", str(output)]) == 0
    manifest = read_manifest(output)
    assert manifest.target == "cuda:sm_90a"
    assert manifest.model_config["attn_logit_softcapping"] == CAP
