"""The embedded default model (SmolLM2-135M-Instruct, Q4_1) decodes the same greedy tokens
with speculation as without, for every method that can draft for it: n-gram lookup (a batch
of three chat prompts, one asking to repeat code, so drafts are accepted), and random EAGLE-1
and EAGLE-3 heads of SmolLM2's real shape in EAGLE's checkpoint layout (the EAGLE-3 one over
half the vocabulary through `d2t`, reading vLLM's default layers 2, 15 and 27 of the 30;
both carry their own embeddings, and EAGLE-1 its LM head, since a quantized target's cannot
stand for them), and a draft model: SmolLM2 itself, the one checkpoint with its tokenizer
that a package ships (its drafts are its own greedy tokens, so nearly all are accepted).
Each runs in a KV pool small enough to preempt, then one prompt again from the prefix
cache. (MTP layers exist only in DeepSeek-V3-family checkpoints.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from default_model_helpers import NEEDS_DEFAULT_MODEL, installed_default_model
from eagle_heads import make_eagle3_head, make_eagle_head
from engine_helpers import token_ids
from safetensors.torch import load_file, save_file

from vllm_tvm.checkpoints.gguf_config import hf_config_from_gguf
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

PATH = installed_default_model()
pytestmark = NEEDS_DEFAULT_MODEL

CODE = (Path(__file__).resolve().parents[1] / "vllm_tvm/runtime/speculative/ngram.py").read_text()
QUESTIONS = (
    "Repeat this code exactly:\n\n" + CODE[CODE.index("class ") :][:600],
    "Name three colours.",
    "What is a compiler?",
)
HEAD_QUESTIONS = ("Name three colours.", "What is a compiler?", "Count from one to ten.")


def greedy_unchanged(llm: LLM, questions: tuple[str, ...]) -> Any:
    """`llm`'s greedy tokens equal its engine's without speculation, with preemptions, and
    again for the first prompt from the prefix cache; the engine's metrics after the run."""
    prompts = [llm.chat_prompt_ids([{"role": "user", "content": q}]) for q in questions]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    engine = llm.engine
    speculator, forward_runner = engine.speculator, engine._forward_runner
    engine.speculator, engine._forward_runner = None, engine.runner  # plain decoding
    expected = token_ids(llm.generate(prompts, params))
    engine.speculator, engine._forward_runner = speculator, forward_runner
    preempted_before = engine.metrics.snapshot().num_preemptions
    assert token_ids(llm.generate(prompts, params)) == expected
    stats = engine.metrics.snapshot()
    assert stats.num_preemptions > preempted_before > 0
    hits = llm.generate(prompts[:1], params)
    assert token_ids(hits) == expected[:1] and hits[0].num_cached_tokens > 0
    return stats


def test_greedy_tokens_with_ngram_speculation_equal_plain_decoding() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2}
    llm = LLM(PATH, block_size=16, num_blocks=18, show_progress=False, speculative_config=spec)
    assert greedy_unchanged(llm, QUESTIONS).spec_decode_num_accepted_tokens > 0


@pytest.fixture(scope="module")
def heads(tmp_path_factory) -> dict[str, Path]:
    """Random EAGLE-1 and EAGLE-3 heads shaped for SmolLM2 (its config read from the GGUF),
    with their own random embeddings (and the EAGLE-1 head its LM head)."""
    root = tmp_path_factory.mktemp("smollm2_heads")
    shape = root / "shape"
    shape.mkdir()
    config = hf_config_from_gguf(PATH)
    (shape / "config.json").write_text(json.dumps(config))
    vocab, size = config["vocab_size"], config["hidden_size"]
    own = {"embed_tokens.weight": torch.randn(vocab, size) * 0.05}
    made = {
        "eagle": (
            make_eagle_head(shape, root / "eagle"),
            {**own, "lm_head.weight": own["embed_tokens.weight"].clone()},
        ),
        "eagle3": (make_eagle3_head(shape, root / "eagle3", draft_vocab=vocab // 2), own),
    }
    for head, extra in made.values():
        weights = head / "model.safetensors"
        save_file({**load_file(weights), **extra}, weights, metadata={"format": "pt"})
    return {method: head for method, (head, _) in made.items()}


@pytest.mark.slow  # SmolLM2 built as the head's target, and the head: compiles of their own
@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_greedy_tokens_with_a_head_equal_plain_decoding(heads, method: str) -> None:
    spec = {"method": method, "model": str(heads[method]), "num_speculative_tokens": 3}
    llm = LLM(PATH, block_size=16, num_blocks=9, show_progress=False, speculative_config=spec)
    assert greedy_unchanged(llm, HEAD_QUESTIONS).spec_decode_num_drafts > 0


def test_greedy_tokens_with_a_draft_model_equal_plain_decoding() -> None:
    spec = {"method": "draft_model", "model": str(PATH), "num_speculative_tokens": 3}
    llm = LLM(PATH, block_size=16, num_blocks=9, show_progress=False, speculative_config=spec)
    assert greedy_unchanged(llm, HEAD_QUESTIONS).spec_decode_num_accepted_tokens > 0
