"""Images through the engine on a tiny random Gemma3ForConditionalGeneration: each image's
placeholder expanded into its soft tokens, the compiled encoder's embeddings in their
place, an image's soft tokens attending to each other both ways during prefill; greedy
tokens equal transformers' (its own image processor and `token_type_ids`), alone and
batched with text-only requests, and the images count toward the prompt length."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import (
    assert_all_blocks_free,
    image_prefill_logits,
    random_image,
    run_to_completion,
)
from gemma3_vision_helpers import gemma3_oracle, oracle_tokens

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.engine.intake import PromptTooLongError
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.sampling.params import SamplingParams

pytestmark = pytest.mark.slow

NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tiny_gemma3_vlm) -> LLM:
    return LLM(tiny_gemma3_vlm.path, device="cpu", show_progress=False)


@pytest.fixture(scope="module")
def oracle(tiny_gemma3_vlm):
    return gemma3_oracle(tiny_gemma3_vlm)


@pytest.fixture(scope="module")
def prompts(tiny_gemma3_vlm, llm: LLM) -> list[tuple[list[int], list[DecodedImage]]]:
    """Three prompts of token ids with one or two images of different sizes, each image
    placeholder a begin-of-image token."""
    boi = tiny_gemma3_vlm.boi_token_id
    encode = llm.tokenizer.encode
    return [
        ([*encode("Describe this:"), boi, *encode(" in a few words.")], [random_image(40, 30, 1)]),
        (
            [*encode("Compare"), boi, *encode(" and"), boi, *encode(".")],
            [
                random_image(70, 90, 2),
                random_image(56, 56, 3),
            ],
        ),
        ([boi, *encode("Once upon a time there was")], [random_image(20, 100, 4)]),
    ]


def _oracle_tokens(oracle, checkpoint, expanded_ids: list[int], images) -> list[int]:
    return oracle_tokens(oracle, checkpoint, expanded_ids, images, NEW_TOKENS)


def test_greedy_tokens_with_images_equal_transformers(
    llm: LLM, oracle, tiny_gemma3_vlm, prompts
) -> None:
    for ids, images in prompts:
        request_id = llm.engine.add_request(None, ids, GREEDY, images=images)
        outputs = run_to_completion(llm)
        ours = outputs[request_id]
        expanded = list(ours.prompt_token_ids)
        assert len(expanded) == len(ids) + len(images) * 5  # 4 soft tokens + end-of-image
        assert ours.outputs[0].token_ids == _oracle_tokens(
            oracle, tiny_gemma3_vlm, expanded, images
        )
    assert_all_blocks_free(llm)


def test_prefill_logits_with_images_equal_transformers(
    llm: LLM, oracle, tiny_gemma3_vlm, prompts
) -> None:
    """Every position's logits of the image prefill (the soft tokens' two-way attention is
    what moves them off the causal ones) within 1e-4 of transformers'."""
    import transformers

    processor = transformers.Gemma3ImageProcessor.from_pretrained(tiny_gemma3_vlm.path)
    for ids, images in prompts:
        expanded, ours = image_prefill_logits(llm, ids, images)
        pixel_values = processor([image.pixels for image in images], return_tensors="pt")[
            "pixel_values"
        ]
        tokens = torch.tensor([expanded])
        with torch.no_grad():
            expected = oracle(
                input_ids=tokens,
                pixel_values=pixel_values,
                token_type_ids=(tokens == tiny_gemma3_vlm.image_token_id).long(),
            ).logits[0]
        np.testing.assert_allclose(ours, expected.numpy(), atol=1e-4, rtol=0)


def test_batched_mixed_requests_equal_sequential(llm: LLM, prompts) -> None:
    text = llm.tokenizer.encode("Paged attention keeps keys and values in blocks")
    requests = [*prompts[:2], (text, []), prompts[2]]
    alone = []
    for ids, images in requests:
        request_id = llm.engine.add_request(None, ids, GREEDY, images=images)
        alone.append(list(run_to_completion(llm)[request_id].outputs[0].token_ids))
    ids_in_order = [
        llm.engine.add_request(None, ids, GREEDY, images=images) for ids, images in requests
    ]
    together = run_to_completion(llm)
    assert [list(together[i].outputs[0].token_ids) for i in ids_in_order] == alone
    assert_all_blocks_free(llm)


def test_a_prompt_chunked_after_its_images_equals_transformers(
    llm: LLM, oracle, tiny_gemma3_vlm
) -> None:
    """A prompt longer than one prefill chunk (the sliding window caps the chunk): its first
    chunk takes the images whole, the text after them runs in later chunks."""
    budget = llm.engine.scheduler_config.max_num_batched_tokens
    text = llm.tokenizer.encode("Paged attention keeps keys and values in blocks. " * 12)
    ids = [*llm.tokenizer.encode("Look:"), tiny_gemma3_vlm.boi_token_id, *text]
    assert len(ids) > 2 * budget
    images = [random_image(33, 77, 5)]
    request_id = llm.engine.add_request(None, ids, GREEDY, images=images)
    ours = run_to_completion(llm)[request_id]
    expanded = list(ours.prompt_token_ids)
    assert ours.outputs[0].token_ids == _oracle_tokens(oracle, tiny_gemma3_vlm, expanded, images)


def test_images_past_one_prefill_chunk_are_refused(llm: LLM, tiny_gemma3_vlm) -> None:
    budget = llm.engine.scheduler_config.max_num_batched_tokens
    ids = [5] * budget + [tiny_gemma3_vlm.boi_token_id]
    with pytest.raises(ValueError, match="one prefill chunk may take"):
        llm.engine.add_request(None, ids, GREEDY, images=[random_image(8, 8, 0)])


def test_images_count_toward_the_prompt_length(llm: LLM, tiny_gemma3_vlm) -> None:
    room = llm.engine.max_model_len - 1
    ids = [tiny_gemma3_vlm.boi_token_id] + [5] * (room - 4)
    with pytest.raises(PromptTooLongError, match="length"):
        llm.engine.add_request(None, ids, GREEDY, images=[random_image(8, 8, 0)])


def test_placeholders_must_match_the_images(llm: LLM, tiny_gemma3_vlm) -> None:
    ids = llm.tokenizer.encode("no placeholder here")
    with pytest.raises(ValueError, match=r"0 image placeholders .* for 1 images"):
        llm.engine.add_request(None, ids, GREEDY, images=[random_image(8, 8, 0)])
