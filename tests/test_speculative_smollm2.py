"""The embedded default model (SmolLM2-135M-Instruct, Q4_1) decodes the same greedy tokens
with n-gram speculation as without: a batch of three chat prompts, one of them asking to
repeat code (so drafts are accepted), in a KV pool small enough to preempt, then again with
the prompts in the prefix cache."""

from __future__ import annotations

from pathlib import Path

from default_model_helpers import NEEDS_DEFAULT_MODEL, installed_default_model
from engine_helpers import token_ids

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
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2}


def test_greedy_tokens_with_ngram_speculation_equal_plain_decoding() -> None:
    llm = LLM(
        PATH, block_size=16, num_blocks=18, show_progress=False, speculative_config=SPECULATIVE
    )
    prompts = [llm.chat_prompt_ids([{"role": "user", "content": q}]) for q in QUESTIONS]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    engine = llm.engine
    speculator, engine.speculator = engine.speculator, None  # the engine without speculation
    expected = token_ids(llm.generate(prompts, params))
    engine.speculator = speculator
    preempted_before = engine.metrics.snapshot().num_preemptions
    assert token_ids(llm.generate(prompts, params)) == expected
    stats = engine.metrics.snapshot()
    assert stats.num_preemptions > preempted_before > 0
    assert stats.spec_decode_num_accepted_tokens > 0
    hits = llm.generate(prompts[:1], params)
    assert token_ids(hits) == expected[:1] and hits[0].num_cached_tokens > 0
