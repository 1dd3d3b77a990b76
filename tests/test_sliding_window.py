"""Sliding-window attention keeps working past the window, against transformers.

Prompts longer than the window run as several prefill chunks (a chunk may not be longer
than the window), and generation continues far past it: Mistral (every layer slides),
Qwen2 (`max_window_layers`: the first layers attend to everything), Gemma 2 (alternating)
and Gemma 3 (5 local : 1 global, its own RoPE base on the local layers).
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import TINY_MODELS, TinyModelSpec, load_oracle, make_tiny_model

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

WINDOW = 16
WINDOWED = {
    "mistral_window": TinyModelSpec("mistral_window", "MistralConfig", {"sliding_window": WINDOW}),
    "qwen2_window": TinyModelSpec(
        "qwen2_window",
        "Qwen2Config",
        {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
    ),
}
NEW_TOKENS = 24
PROMPT_LENGTH = 57


@pytest.fixture(scope="module")
def windowed_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir):
    made = {}

    def get(name: str):
        if name in TINY_MODELS:
            return tiny_model_dir(name)
        if name not in made:
            made[name] = make_tiny_model(WINDOWED[name], tmp_path_factory.mktemp(name))
        return made[name]

    return get


def _prompt(vocab: int) -> list[int]:
    return [(7 + 37 * i) % (vocab - 2) + 2 for i in range(PROMPT_LENGTH)]


@pytest.mark.parametrize(
    "name", ["mistral_window", "qwen2_window", "gemma2_window_softcap", "gemma3_local_rope"]
)
def test_long_prompt_and_generation_past_the_window_equal_transformers(
    name: str, windowed_dir
) -> None:
    model_dir = windowed_dir(name)
    llm = LLM(model_dir, device="cpu", show_progress=False)
    assert (
        llm.runner.kv_config.prefill_chunk_size
        <= llm.runner.manifest.model_config["sliding_window"]
    )
    prompt = _prompt(llm.runner.vocab_size)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    ours = llm.generate(prompt, params)[0].outputs[0].token_ids
    oracle = load_oracle(model_dir)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    with torch.no_grad():
        expected = oracle.generate(
            torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False
        )[0, PROMPT_LENGTH:]
    assert list(ours) == expected.tolist()


def test_sliding_models_run_without_prefix_caching(windowed_dir) -> None:
    llm = LLM(windowed_dir("gemma3_local_rope"), device="cpu", show_progress=False)
    assert not llm.engine.cache_config.enable_prefix_caching
