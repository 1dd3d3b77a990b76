"""Images through the engine on a tiny random Qwen2_5_VLForConditionalGeneration: the
compiled vision tower (window attention, 2-D rotary, patch merger) equals transformers'
over several images of different sizes, the prompt's M-RoPE positions equal its
`get_rope_index`, and greedy tokens and prefill logits equal transformers' (its own image
processor, `image_grid_thw` and `mm_token_type_ids`), alone and batched with text-only
requests; decode after an image runs at index + rope delta."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import random_image
from qwen2_5_vl_helpers import (
    GREEDY,
    check_batched_equals_sequential,
    check_chat_with_images,
    check_greedy_with_images,
    check_prefill_logits,
    check_rope_positions,
    check_text_only_greedy,
)

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tiny_qwen2_5_vlm):
    return tiny_qwen2_5_vlm


@pytest.fixture(scope="module")
def llm(checkpoint) -> LLM:
    return LLM(checkpoint.path, device="cpu", show_progress=False)


@pytest.fixture(scope="module")
def oracle(tiny_qwen2_5_vlm_oracle):
    return tiny_qwen2_5_vlm_oracle


@pytest.fixture(scope="module")
def hf_processor(tiny_qwen2_5_vlm_processor):
    return tiny_qwen2_5_vlm_processor


@pytest.fixture(scope="module")
def prompts(checkpoint, llm: LLM) -> list[tuple[list[int], list[DecodedImage]]]:
    """Three prompts of token ids with one to three images of different sizes (one larger
    than a window, one not a whole number of windows), each image's placeholder
    <|vision_start|><|image_pad|><|vision_end|>."""
    image = [checkpoint.vision_start_token_id, checkpoint.image_token_id]
    image.append(checkpoint.vision_end_token_id)
    encode = llm.tokenizer.encode
    return [
        (
            [*encode("Describe this:"), *image, *encode(" in a few words.")],
            [random_image(60, 45, 1)],
        ),
        (
            [*encode("Compare"), *image, *encode(" and"), *image, *encode(".")],
            [random_image(70, 120, 2), random_image(56, 56, 3)],
        ),
        (
            [*image, *encode("Once"), *image, *image, *encode(" upon a time there was")],
            [random_image(20, 100, 4), random_image(90, 60, 5), random_image(30, 30, 6)],
        ),
    ]


def test_encoder_output_equals_transformers(llm: LLM, oracle, hf_processor, prompts) -> None:
    """Three images of different sizes in one encoder call: the same patches as
    transformers' processor makes, and the merged tokens within 1e-4 of its vision tower."""
    ids, images = prompts[2]
    request = llm.engine.make_request(ids, GREEDY, images=images)
    ours = request.seqs[0].images
    processed = hf_processor([image.pixels for image in images], return_tensors="pt")
    patches = ours.pixel_values.reshape(-1, ours.pixel_values.shape[-1])
    np.testing.assert_allclose(patches, processed["pixel_values"].numpy(), atol=1e-5, rtol=0)
    encoded = llm.runner.encode_images(ours.pixel_values, ours.encoder_layout)
    with torch.no_grad():
        expected = oracle.model.visual(
            processed["pixel_values"], grid_thw=processed["image_grid_thw"]
        ).pooler_output.numpy()
    assert (
        encoded.shape
        == expected.shape
        == (sum(ours.lengths), oracle.config.text_config.hidden_size)
    )
    np.testing.assert_allclose(encoded, expected, atol=1e-4, rtol=0)


def test_rope_positions_equal_transformers(llm: LLM, oracle, hf_processor, checkpoint, prompts):
    check_rope_positions(llm, oracle, hf_processor, checkpoint, prompts)


def test_greedy_tokens_with_images_equal_transformers(
    llm: LLM, oracle, hf_processor, checkpoint, prompts
) -> None:
    check_greedy_with_images(llm, oracle, hf_processor, checkpoint, prompts)


def test_prefill_logits_with_images_equal_transformers(
    llm: LLM, oracle, hf_processor, checkpoint, prompts
) -> None:
    check_prefill_logits(llm, oracle, hf_processor, checkpoint, prompts)


def test_text_only_greedy_tokens_equal_transformers(llm: LLM, oracle) -> None:
    check_text_only_greedy(llm, oracle)


def test_batched_mixed_requests_equal_sequential(llm: LLM, prompts) -> None:
    check_batched_equals_sequential(llm, prompts)


def test_a_text_prompt_expands_its_image_pads(llm: LLM, checkpoint, prompts) -> None:
    """The chat's placeholder in a text prompt expands as the processor does: the same ids
    as the token-id prompt."""
    ids, images = prompts[1]
    text = llm.tokenizer.decode(ids, skip_special_tokens=False)
    from_text = llm.engine.make_request(text, GREEDY, images=images).prompt_token_ids
    assert from_text == llm.engine.make_request(ids, GREEDY, images=images).prompt_token_ids
    assert (
        llm.engine.intake.image_intake.placeholder == "<|vision_start|><|image_pad|><|vision_end|>"
    )


def test_llm_chat_with_images_equals_transformers(
    llm: LLM, oracle, hf_processor, checkpoint
) -> None:
    images = [random_image(50, 80, 7), random_image(64, 40, 8)]
    check_chat_with_images(llm, oracle, hf_processor, checkpoint, images)


def test_runtime_spec_records_the_patch_layout(llm: LLM, checkpoint) -> None:
    vision = llm.runner.spec.vision
    assert vision is not None and vision.multimodal_rope
    assert vision.patch_merge is not None and vision.patch_merge.spatial_merge_size == 2
    assert vision.image_token_id == checkpoint.image_token_id
    assert vision.begin_image_token_id == checkpoint.vision_start_token_id
    assert llm.runner.spec.prefix_caching  # tests/test_qwen2_5_vl_prefix_cache.py


def test_placeholders_must_match_the_images(llm: LLM) -> None:
    ids = llm.tokenizer.encode("no placeholder here")
    with pytest.raises(ValueError, match=r"0 image placeholders .* for 1 images"):
        llm.engine.add_request(None, ids, GREEDY, images=[random_image(28, 28, 0)])


def test_qwen2_vl_is_refused_by_name() -> None:
    from vllm_tvm.model_defs.architectures import UnsupportedArchitectureError, family_for

    with pytest.raises(UnsupportedArchitectureError, match="Qwen2VLForConditionalGeneration: "):
        family_for({"architectures": ["Qwen2VLForConditionalGeneration"]})


def test_more_patches_than_the_tower_encodes_at_once_are_refused(llm: LLM, monkeypatch) -> None:
    from vllm_tvm.runtime.engine import patch_merge_intake

    monkeypatch.setattr(patch_merge_intake, "MAX_PROMPT_PATCHES", 16)
    image = [llm.engine.intake.image_intake.vision.image_token_id]
    with pytest.raises(ValueError, match="MAX_PROMPT_PATCHES"):
        llm.engine.add_request(None, image, GREEDY, images=[random_image(84, 84, 0)])
