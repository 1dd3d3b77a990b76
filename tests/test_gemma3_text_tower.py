"""A multimodal Gemma 3 checkpoint (`Gemma3ForConditionalGeneration`) on text-only input:
greedy tokens equal transformers' (the vision tower is compiled and loaded beside the
decoder, and unused)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_models import BASE, train_tokenizer

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

NEW_TOKENS = 24
PROMPT = "Beautiful is better than ugly. Explicit is better than implicit."
TEXT = {
    **BASE,
    "head_dim": 16,
    "num_hidden_layers": 3,
    "sliding_window": 12,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
}
VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": 28,
    "patch_size": 14,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import transformers

    path = tmp_path_factory.mktemp("gemma3_multimodal")
    tokenizer = train_tokenizer(path)
    text = {**TEXT, "vocab_size": tokenizer.get_vocab_size()}
    config = transformers.Gemma3Config(
        text_config=text, vision_config=VISION, mm_tokens_per_image=4
    )
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    model.save_pretrained(path)
    return path


def test_text_tower_greedy_tokens_equal_transformers(checkpoint: Path) -> None:
    import transformers

    llm = LLM(checkpoint, device="cpu", show_progress=False)
    prompt = llm.tokenizer.encode(PROMPT)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    ours = llm.generate(prompt, params)[0].outputs[0].token_ids
    oracle = transformers.Gemma3ForConditionalGeneration.from_pretrained(
        checkpoint, dtype=torch.float32
    ).eval()
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    with torch.no_grad():
        expected = oracle.generate(
            torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False
        )[0, len(prompt) :]
    assert list(ours) == expected.tolist()
