"""Helpers of the engine tests: the check that an `LLM`'s KV pool is empty again (run on
every `make_llm` LLM after its test, see conftest.py), and prompts of chosen lengths cut
from the tiny tokenizer's corpus."""

from __future__ import annotations

from typing import Any

import numpy as np
from tiny_models import CORPUS

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.kv.kv_cache import COMPILED_PAGE_SIZE
from vllm_tvm.runtime.model.batch import forward_images
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.sampling.params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def random_image(height: int, width: int, seed: int) -> DecodedImage:
    """A decoded RGB image of random pixels."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return DecodedImage(pixels=pixels, part_index=0)


def run_to_completion(llm: LLM) -> dict[str, Any]:
    """Step `llm`'s engine until nothing is left; each finished request's final output."""
    finished = {}
    while llm.engine.has_unfinished:
        finished.update(step_finished(llm))
    return finished


def step_finished(llm: LLM) -> dict[str, Any]:
    """One engine step of `llm`; the final output of each request it finished."""
    return {output.request_id: output for output in llm.engine.step() if output.finished}


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


def image_prefill_logits(llm: LLM, ids: list[int], images: list, rope: bool = False) -> tuple:
    """(the expanded prompt ids, our prefill logits at every position) of `ids` with
    `images`, run on a KV sequence beside the engine's and removed after; `rope`: at the
    prompt's M-RoPE positions."""
    seq_id = 1_000_000
    request = llm.engine.make_request(ids, SamplingParams(temperature=0.0), images=images)
    expanded = request.prompt_token_ids
    prompt_images = request.seqs[0].images
    extra: dict = {"rope_positions": prompt_images.positions(0, len(expanded))} if rope else {}
    if llm.runner.spec.recurrent_state:  # an idle engine holds no slot; a taken one is zeroed
        llm.runner.recurrent_pool.zero_slot(0)
        extra["recurrent_slots"] = [0]
    llm.runner.kv_cache.add_sequence(seq_id)
    try:
        logits = llm.runner.prefill_logits(
            [seq_id],
            [expanded],
            list(range(len(expanded))),
            images=forward_images(llm.runner, [(0, prompt_images)]),
            **extra,
        ).numpy()
    finally:
        llm.runner.kv_cache.remove_sequence(seq_id)
    return expanded, logits
