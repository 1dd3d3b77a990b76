"""Helpers of the engine tests: the check that an `LLM`'s KV pool is empty again (run on
every `make_llm` LLM after its test, see conftest.py), and prompts of chosen lengths cut
from the tiny tokenizer's corpus."""

from __future__ import annotations

from typing import Any

from tiny_models import CORPUS

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.kv.kv_cache import COMPILED_PAGE_SIZE
from vllm_tvm.runtime.sampling.params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def corpus_ids(llm: LLM) -> list[int]:
    """The token ids of the whole tiny corpus (a few hundred)."""
    return [token for text in CORPUS for token in llm.tokenizer.encode(text, False)]


def prompts_of_lengths(llm: LLM, lengths: list[int], stride: int = 37) -> list[list[int]]:
    """One prompt per length, cut from the corpus at different offsets (no shared starts)."""
    ids = corpus_ids(llm)
    prompts = []
    for index, length in enumerate(lengths):
        start = (index * stride) % (len(ids) - length)
        prompts.append(ids[start : start + length])
    return prompts


def token_ids(outputs: list[Any]) -> list[list[int]]:
    """The first completion's tokens of each RequestOutput."""
    return [output.outputs[0].token_ids for output in outputs]


def assert_all_blocks_free(llm: LLM) -> None:
    """Nothing runs or waits, no block is in use, and once the prefix cache is dropped every
    page of TVM's cache is free again."""
    engine = llm.engine
    assert not engine.has_unfinished
    assert engine.block_manager.num_used_blocks == 0
    engine.reset_prefix_cache()
    config = engine.cache_config
    pages = config.num_tokens // COMPILED_PAGE_SIZE + 1  # TVM keeps one spare page
    assert llm.runner.kv_cache.available_pages() == pages
