"""Which longrope factors run when (model_defs/rope_scaling.py), against transformers.

transformers rotates with the short factors while a sequence is at most
`original_max_position_embeddings` (128 in the tiny `phi3_longrope_partial`) long and with
the long factors past it. The engine's context is that original length: a sequence grows
right up to it with transformers' short-factor tokens, and a longer context is refused by
name.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import TINY_MODELS, load_oracle

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

NAME = "phi3_longrope_partial"
ORIGINAL = TINY_MODELS[NAME].overrides["original_max_position_embeddings"]
PROMPT_LENGTH = 100


def test_generation_up_to_the_original_length_equals_transformers(tiny_model_dir) -> None:
    model_dir = tiny_model_dir(NAME)
    llm = LLM(model_dir, device="cpu", show_progress=False)
    assert llm.engine.max_model_len == ORIGINAL
    vocab = llm.runner.vocab_size
    prompt = [(5 + 41 * i) % (vocab - 2) + 2 for i in range(PROMPT_LENGTH)]
    params = SamplingParams(temperature=0.0, max_tokens=ORIGINAL, ignore_eos=True)
    output = llm.generate(prompt, params)[0].outputs[0]
    assert len(output.token_ids) == ORIGINAL - PROMPT_LENGTH
    assert output.finish_reason == "length"
    oracle = load_oracle(model_dir)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    with torch.no_grad():
        expected = oracle.generate(
            torch.tensor([prompt]), max_new_tokens=len(output.token_ids), do_sample=False
        )[0, PROMPT_LENGTH:]
    assert list(output.token_ids) == expected.tolist()


def test_a_context_past_the_original_length_is_refused_by_name(tiny_model_dir) -> None:
    with pytest.raises(ValueError, match=rf"context limit {ORIGINAL} \(longrope: "):
        LLM(tiny_model_dir(NAME), device="cpu", show_progress=False, max_model_len=ORIGINAL + 1)
