"""Prefix caching of prompts with images under M-RoPE, on the tiny random
Qwen2_5_VLForConditionalGeneration: the cache holds keys the model rotated at the prompt's
3-D positions, so a hit is right only when the suffix after it (and every decode step) takes
its positions from the prompt's table at the hit's end, and only when the image's digest
tells apart two images whose positions differ (the patch grid, even over equal bytes).
Every answer's tokens and log-probabilities equal transformers' greedy run."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import assert_all_blocks_free, random_image, run_to_completion
from qwen2_5_vl_helpers import hf_inputs, oracle_greedy

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.sampling.params import SamplingParams

pytestmark = pytest.mark.slow

NEW_TOKENS = 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=0)
BLOCK_SIZE = 16
TEXT_BEFORE = "A long preamble of plain words fills the first block before any image shows"
SHARED_AFTER = " in a few words, naming every colour and shape that you can see"
FOLLOW_UPS = (" first.", " and then say which one of them is the largest of all.")


@pytest.fixture(scope="module")
def checkpoint(tiny_qwen2_5_vlm):
    return tiny_qwen2_5_vlm


@pytest.fixture(scope="module")
def llm(checkpoint) -> LLM:
    return LLM(checkpoint.path, device="cpu", show_progress=False, block_size=BLOCK_SIZE)


@pytest.fixture(scope="module")
def oracle(tiny_qwen2_5_vlm_oracle):
    return tiny_qwen2_5_vlm_oracle


def _image_prompt(llm: LLM, checkpoint, before: str, after: str) -> list[int]:
    """`before`, one image's placeholder, `after`, as token ids."""
    encode = llm.tokenizer.encode
    image = [checkpoint.vision_start_token_id, checkpoint.image_token_id]
    return [*encode(before), *image, checkpoint.vision_end_token_id, *encode(after)]


def _generate(llm: LLM, requests: list[tuple[list[int], list[DecodedImage]]]) -> list:
    """Run `requests` together; their outputs in order."""
    ids = [llm.engine.add_request(None, prompt, GREEDY, images=imgs) for prompt, imgs in requests]
    finished = run_to_completion(llm)
    return [finished[request_id] for request_id in ids]


def _assert_equals_transformers(output, oracle, processor, checkpoint, images) -> None:
    """`output`'s tokens equal transformers' greedy ones; each log-probability within 1e-4."""
    inputs = hf_inputs(processor, checkpoint, list(output.prompt_token_ids), images)
    tokens, logprobs = oracle_greedy(oracle, inputs, NEW_TOKENS)
    assert list(output.outputs[0].token_ids) == tokens
    ours = [entry.logprob for entry in output.outputs[0].logprobs]
    np.testing.assert_allclose(ours, logprobs, atol=1e-4, rtol=0)


def _hits(llm: LLM) -> int:
    return llm.engine.metrics.snapshot().prefix_cache_hits


def _solid_image(height: int, width: int) -> DecodedImage:
    """One colour everywhere: every patch holds the same values, whatever the grid."""
    return DecodedImage(pixels=np.full((height, width, 3), 90, dtype=np.uint8), part_index=0)


def test_the_same_image_with_other_follow_up_text_is_a_hit(
    llm: LLM, oracle, tiny_qwen2_5_vlm_processor, checkpoint
) -> None:
    """Shared text, the image and more shared text span whole blocks; the follow-ups differ:
    the second prompt computes its suffix after the image from the hit's end."""
    assert llm.runner.spec.prefix_caching and llm.engine.cache_config.enable_prefix_caching
    llm.engine.reset_prefix_cache()
    first, second = (
        _image_prompt(llm, checkpoint, "Describe this", SHARED_AFTER + follow_up)
        for follow_up in FOLLOW_UPS
    )
    image = random_image(112, 112, 21)  # 8 x 8 patches: 16 soft tokens
    (miss,) = _generate(llm, [(first, [image])])
    before = _hits(llm)
    copy = DecodedImage(pixels=image.pixels.copy(), part_index=0)
    (hit,) = _generate(llm, [(second, [copy])])
    request = llm.engine.make_request(second, GREEDY, images=[copy])
    floor = request.seqs[0].images.prefill_floor
    assert miss.num_cached_tokens == 0
    assert floor <= hit.num_cached_tokens < len(hit.prompt_token_ids) - 1
    assert _hits(llm) - before == hit.num_cached_tokens
    for output in (miss, hit):
        _assert_equals_transformers(output, oracle, tiny_qwen2_5_vlm_processor, checkpoint, [image])
    assert_all_blocks_free(llm)


def test_a_different_image_is_no_hit(
    llm: LLM, oracle, tiny_qwen2_5_vlm_processor, checkpoint
) -> None:
    llm.engine.reset_prefix_cache()
    prompt = _image_prompt(llm, checkpoint, "Describe this", SHARED_AFTER + FOLLOW_UPS[0])
    first, second = random_image(112, 112, 22), random_image(112, 112, 23)
    _generate(llm, [(prompt, [first])])
    (other,) = _generate(llm, [(prompt, [second])])
    assert other.num_cached_tokens == 0
    _assert_equals_transformers(other, oracle, tiny_qwen2_5_vlm_processor, checkpoint, [second])
    assert_all_blocks_free(llm)


def test_equal_patches_in_another_grid_are_no_hit(
    llm: LLM, oracle, tiny_qwen2_5_vlm_processor, checkpoint
) -> None:
    """4 x 8 and 8 x 4 patches of one colour: equal pixel-value bytes, but the soft tokens'
    row and column positions (and the tower's 2-D rotary) differ."""
    llm.engine.reset_prefix_cache()
    prompt = _image_prompt(llm, checkpoint, "Describe this", SHARED_AFTER + FOLLOW_UPS[0])
    wide, tall = _solid_image(56, 112), _solid_image(112, 56)
    made = [
        llm.engine.make_request(prompt, GREEDY, images=[im]).seqs[0].images for im in (wide, tall)
    ]
    assert made[0].pixel_values.tobytes() == made[1].pixel_values.tobytes()
    assert made[0].digests != made[1].digests
    assert not np.array_equal(made[0].rope_positions, made[1].rope_positions)
    _generate(llm, [(prompt, [wide])])
    (other,) = _generate(llm, [(prompt, [tall])])
    assert other.num_cached_tokens == 0
    _assert_equals_transformers(other, oracle, tiny_qwen2_5_vlm_processor, checkpoint, [tall])
    assert_all_blocks_free(llm)


def test_text_shares_the_prefix_before_an_image(
    llm: LLM, oracle, tiny_qwen2_5_vlm_processor, checkpoint
) -> None:
    """The text before the first image rotates at its indices in all three streams: a
    text-only prompt hits an image prompt's first block, and batched with the image prompt
    again (a hit through its image) both equal transformers."""
    llm.engine.reset_prefix_cache()
    encode = llm.tokenizer.encode
    with_image = _image_prompt(llm, checkpoint, TEXT_BEFORE, SHARED_AFTER)
    text = encode(TEXT_BEFORE + FOLLOW_UPS[1])
    assert with_image.index(checkpoint.vision_start_token_id) >= BLOCK_SIZE
    image = random_image(84, 112, 24)
    (first,) = _generate(llm, [(with_image, [image])])
    text_output, again = _generate(llm, [(text, []), (with_image, [image])])
    assert first.num_cached_tokens == 0
    assert text_output.num_cached_tokens >= BLOCK_SIZE
    assert again.num_cached_tokens > with_image.index(checkpoint.vision_start_token_id)
    _assert_equals_transformers(text_output, oracle, tiny_qwen2_5_vlm_processor, checkpoint, [])
    for output in (first, again):
        _assert_equals_transformers(output, oracle, tiny_qwen2_5_vlm_processor, checkpoint, [image])
    assert_all_blocks_free(llm)
