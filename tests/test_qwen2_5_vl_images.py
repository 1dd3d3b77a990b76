"""Images through the engine on a tiny random Qwen2_5_VLForConditionalGeneration: the
compiled vision tower (window attention, 2-D rotary, patch merger) equals transformers'
over several images of different sizes, the prompt's M-RoPE positions equal its
`get_rope_index`, and greedy tokens and prefill logits equal transformers' (its own image
processor, `image_grid_thw` and `mm_token_type_ids`), alone and batched with text-only
requests; decode after an image runs at index + rope delta."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch
from engine_helpers import (
    assert_all_blocks_free,
    image_prefill_logits,
    random_image,
    run_to_completion,
)
from PIL import Image
from qwen2_5_vl_helpers import hf_inputs, oracle_greedy

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.sampling.params import SamplingParams

pytestmark = pytest.mark.slow

NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


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
    for ids, images in prompts:
        request = llm.engine.make_request(ids, GREEDY, images=images)
        ours = request.seqs[0].images
        inputs = hf_inputs(hf_processor, checkpoint, request.prompt_token_ids, images)
        positions, delta = oracle.model.get_rope_index(
            inputs["input_ids"],
            mm_token_type_ids=inputs["mm_token_type_ids"],
            image_grid_thw=inputs["image_grid_thw"],
        )
        np.testing.assert_array_equal(ours.rope_positions, positions[:, 0].numpy())
        assert ours.rope_delta == int(delta) != 0


def test_greedy_tokens_with_images_equal_transformers(
    llm: LLM, oracle, hf_processor, checkpoint, prompts
) -> None:
    """The tokens equal transformers', and so does every step's log-probability of its
    token (within 1e-4): the decode steps run at index + rope delta (the tiny model's
    greedy tokens alone hardly move with the positions)."""
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=0)
    for ids, images in prompts:
        request_id = llm.engine.add_request(None, ids, params, images=images)
        ours = run_to_completion(llm)[request_id].outputs[0]
        inputs = hf_inputs(hf_processor, checkpoint, list(_run_prompt(llm, ids, images)), images)
        expected, expected_logprobs = oracle_greedy(oracle, inputs, NEW_TOKENS)
        assert ours.token_ids == expected
        logprobs = [entry.logprob for entry in ours.logprobs]
        np.testing.assert_allclose(logprobs, expected_logprobs, atol=1e-4, rtol=0)
    assert_all_blocks_free(llm)


def _run_prompt(llm: LLM, ids: list[int], images) -> list[int]:
    """The expanded prompt ids of `ids` with `images`."""
    return llm.engine.make_request(ids, GREEDY, images=images).prompt_token_ids


def test_prefill_logits_with_images_equal_transformers(
    llm: LLM, oracle, hf_processor, checkpoint, prompts
) -> None:
    for ids, images in prompts:
        expanded, ours = image_prefill_logits(llm, ids, images, rope=True)
        inputs = hf_inputs(hf_processor, checkpoint, expanded, images)
        with torch.no_grad():
            expected = oracle(**inputs).logits[0]
        np.testing.assert_allclose(ours, expected.numpy(), atol=1e-4, rtol=0)


def test_text_only_greedy_tokens_equal_transformers(llm: LLM, oracle) -> None:
    """Without images every forward rotates at the cache's positions (plain RoPE is M-RoPE
    at equal streams)."""
    ids = llm.tokenizer.encode("Paged attention keeps keys and values in blocks")
    request_id = llm.engine.add_request(None, ids, GREEDY)
    ours = run_to_completion(llm)[request_id].outputs[0].token_ids
    oracle.model.rope_deltas = None
    tokens = torch.tensor([ids])
    with torch.no_grad():
        out = oracle.generate(
            input_ids=tokens,
            attention_mask=torch.ones_like(tokens),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
        )
    assert ours == out[0, len(ids) :].tolist()


def test_batched_mixed_requests_equal_sequential(llm: LLM, prompts) -> None:
    text = llm.tokenizer.encode("Paged attention keeps keys and values in blocks")
    requests = [prompts[0], (text, []), *prompts[1:]]
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
    """`LLM.chat` with two `image_url` data: URLs: the prompt is the chat template with each
    image part as <|vision_start|><|image_pad|><|vision_end|> (parts joined by newlines, as
    vLLM joins them for a template that takes text) and each pad repeated as transformers'
    processor does; the tokens equal transformers'."""
    images = [random_image(50, 80, 7), random_image(64, 40, 8)]
    urls = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image.pixels).save(buffer, format="PNG")
        urls.append("data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode())
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    question = {"type": "text", "text": "What differs?"}
    ours = llm.chat([{"role": "user", "content": [*parts, question]}], GREEDY)[0]
    grids = hf_processor([image.pixels for image in images])["image_grid_thw"]
    pads = ["<|image_pad|>" * (int(t * h * w) // 4) for t, h, w in grids]
    content = "\n".join(
        [*(f"<|vision_start|>{pad}<|vision_end|>" for pad in pads), "What differs?"]
    )
    expected_text = f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
    expanded = llm.tokenizer.encode(expected_text, add_special_tokens=False)
    assert list(ours.prompt_token_ids) == expanded
    oracle.model.rope_deltas = None
    with torch.no_grad():
        out = oracle.generate(
            **hf_inputs(hf_processor, checkpoint, expanded, images),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
        )
    assert ours.outputs[0].token_ids == out[0, len(expanded) :].tolist()


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
