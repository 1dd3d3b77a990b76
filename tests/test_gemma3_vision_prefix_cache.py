"""Prefix caching of prompts with images, keyed by each image's digest (vLLM's scheme): on
a tiny random Gemma3ForConditionalGeneration whose layers all attend fully (sliding layers
switch prefix caching off), the same image again is a hit, a different image at the same
positions is not, a hit that would end before the last image is not used, and every
answer equals transformers' greedy tokens."""

from __future__ import annotations

import pytest
from engine_helpers import assert_all_blocks_free, random_image, run_to_completion
from gemma3_vision_helpers import gemma3_oracle, oracle_tokens
from tiny_vlm import gemma3_vlm_checkpoint

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.kv.prefix_cache import extend_block_hashes
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.requests.prompt_images import MediaPlaceholder
from vllm_tvm.runtime.sampling.params import SamplingParams

NEW_TOKENS = 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
BLOCK_SIZE = 16
TEXT_AFTER = "Paged attention keeps keys and values in blocks of sixteen tokens each"
TEXT_BEFORE = "A long preamble of plain words fills the first block before any image shows"


def _placeholder(digest_byte: str) -> MediaPlaceholder:
    return MediaPlaceholder(offset=20, length=8, digest=digest_byte * 32)


def test_block_hashes_fold_in_the_image_digest_from_its_first_block_on() -> None:
    tokens = list(range(64))
    first: list[bytes] = []
    same: list[bytes] = []
    other: list[bytes] = []
    extend_block_hashes(first, tokens, BLOCK_SIZE, 4, [_placeholder("ab")])
    extend_block_hashes(same, tokens, BLOCK_SIZE, 4, [_placeholder("ab")])
    extend_block_hashes(other, tokens, BLOCK_SIZE, 4, [_placeholder("cd")])
    plain: list[bytes] = []
    extend_block_hashes(plain, tokens, BLOCK_SIZE, 4)
    assert first == same
    assert first[0] == other[0] == plain[0]  # block 0 (tokens 0-15) holds no image token
    assert all(a != b for a, b in zip(first[1:], other[1:], strict=True))
    assert first[1] != plain[1]


def test_a_block_holding_two_parts_of_one_image_is_told_apart_from_another_part() -> None:
    """Two placeholders with one digest at different offsets give different keys."""
    tokens = [7] * 32
    early: list[bytes] = []
    late: list[bytes] = []
    extend_block_hashes(early, tokens, BLOCK_SIZE, 2, [MediaPlaceholder(0, 24, "ee" * 32)])
    extend_block_hashes(late, tokens, BLOCK_SIZE, 2, [MediaPlaceholder(8, 24, "ee" * 32)])
    assert early[0] != late[0] and early[1] != late[1]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("gemma3_vlm_full")
    return gemma3_vlm_checkpoint(path, layer_types=["full_attention"] * 3)


@pytest.fixture(scope="module")
def llm(checkpoint) -> LLM:
    return LLM(checkpoint.path, device="cpu", show_progress=False, block_size=BLOCK_SIZE)


@pytest.fixture(scope="module")
def oracle(checkpoint):
    return gemma3_oracle(checkpoint)


def _copy(image: DecodedImage) -> DecodedImage:
    """The same image decoded anew (equal pixels, a different array)."""
    return DecodedImage(pixels=image.pixels.copy(), part_index=image.part_index)


def _generate(llm: LLM, requests: list[tuple[list[int], list[DecodedImage]]]) -> list:
    """Run `requests` together; their outputs in order."""
    ids = [llm.engine.add_request(None, prompt, GREEDY, images=imgs) for prompt, imgs in requests]
    finished = run_to_completion(llm)
    return [finished[request_id] for request_id in ids]


def _expected(oracle, checkpoint, output, images) -> list[int]:
    return oracle_tokens(oracle, checkpoint, list(output.prompt_token_ids), images, NEW_TOKENS)


def _hits(llm: LLM) -> int:
    return llm.engine.metrics.snapshot().prefix_cache_hits


@pytest.mark.slow
def test_the_same_image_again_is_a_prefix_hit_with_equal_tokens(
    llm: LLM, oracle, checkpoint
) -> None:
    assert llm.runner.spec.prefix_caching and llm.engine.cache_config.enable_prefix_caching
    llm.engine.reset_prefix_cache()
    prompt = [checkpoint.boi_token_id, *llm.tokenizer.encode(TEXT_AFTER)]
    image = random_image(40, 30, 11)
    (miss,) = _generate(llm, [(prompt, [image])])
    before = _hits(llm)
    (hit,) = _generate(llm, [(prompt, [_copy(image)])])
    assert miss.num_cached_tokens == 0
    assert hit.num_cached_tokens >= BLOCK_SIZE
    assert _hits(llm) - before == hit.num_cached_tokens
    expected = _expected(oracle, checkpoint, miss, [image])
    assert list(miss.outputs[0].token_ids) == list(hit.outputs[0].token_ids) == expected
    assert_all_blocks_free(llm)


@pytest.mark.slow
def test_a_different_image_at_the_same_positions_is_no_hit(llm: LLM, oracle, checkpoint) -> None:
    llm.engine.reset_prefix_cache()
    prompt = [checkpoint.boi_token_id, *llm.tokenizer.encode(TEXT_AFTER)]
    first, second = random_image(40, 30, 12), random_image(40, 30, 13)
    _generate(llm, [(prompt, [first])])
    (other,) = _generate(llm, [(prompt, [second])])
    assert other.num_cached_tokens == 0
    assert list(other.outputs[0].token_ids) == _expected(oracle, checkpoint, other, [second])
    assert_all_blocks_free(llm)


@pytest.mark.slow
def test_a_hit_ending_before_the_last_image_is_not_used(llm: LLM, oracle, checkpoint) -> None:
    """The first block is text only and cached, the image after it differs: the image's
    two-way attention needs every key in its own chunk, so the prompt runs from token 0."""
    llm.engine.reset_prefix_cache()
    encode = llm.tokenizer.encode
    prompt = [*encode(TEXT_BEFORE), checkpoint.boi_token_id, *encode(TEXT_AFTER)]
    assert prompt.index(checkpoint.boi_token_id) >= BLOCK_SIZE
    first, second = random_image(50, 50, 14), random_image(50, 50, 15)
    _generate(llm, [(prompt, [first])])
    (other,) = _generate(llm, [(prompt, [second])])
    (again,) = _generate(llm, [(prompt, [_copy(first)])])
    assert other.num_cached_tokens == 0
    assert again.num_cached_tokens > prompt.index(checkpoint.boi_token_id) + 5
    assert list(other.outputs[0].token_ids) == _expected(oracle, checkpoint, other, [second])
    assert list(again.outputs[0].token_ids) == _expected(oracle, checkpoint, again, [first])
    assert_all_blocks_free(llm)


@pytest.mark.slow
def test_a_mixed_batch_of_hits_misses_and_text_equals_transformers(
    llm: LLM, oracle, checkpoint
) -> None:
    llm.engine.reset_prefix_cache()
    encode = llm.tokenizer.encode
    boi = checkpoint.boi_token_id
    with_image = [boi, *encode(TEXT_AFTER)]
    two_images = [*encode("Compare"), boi, *encode(" and"), boi, *encode(TEXT_AFTER)]
    cached, fresh = random_image(30, 60, 16), random_image(60, 30, 17)
    third = random_image(56, 56, 18)
    _generate(llm, [(with_image, [cached]), (two_images, [cached, third])])
    text = encode(TEXT_BEFORE)
    requests = [
        (with_image, [_copy(cached)]),
        (with_image, [fresh]),
        (text, []),
        (two_images, [_copy(cached), third]),
        (two_images, [third, _copy(cached)]),
    ]
    outputs = _generate(llm, requests)
    assert [output.num_cached_tokens > 0 for output in outputs] == [
        True,
        False,
        False,
        True,
        False,
    ]
    (alone,) = _generate(llm, [(text, [])])
    assert list(outputs[2].outputs[0].token_ids) == list(alone.outputs[0].token_ids)
    for output, (_, images) in zip(outputs, requests, strict=True):
        if images:
            expected = _expected(oracle, checkpoint, output, images)
            assert list(output.outputs[0].token_ids) == expected
    assert_all_blocks_free(llm)
