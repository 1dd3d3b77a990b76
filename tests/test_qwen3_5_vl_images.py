"""Images through the engine on a tiny random Qwen3_5ForConditionalGeneration (and its MoE
class): the compiled vision tower (learned position table, full attention per frame) fed by
our processor equals transformers' over several images of different sizes, the prompt's
M-RoPE positions equal its `get_rope_index`, and greedy tokens and prefill logits of the
hybrid decoder (Gated DeltaNet layers, gated full attention with interleaved M-RoPE on its
partial rotary) equal transformers' (its own image processor, `image_grid_thw` and
`mm_token_type_ids`), alone and batched with a text-only request; decode after an image
runs at index + rope delta. Every prompt mixes 1 to 3 images of different sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import random_image
from qwen2_5_vl_helpers import (
    GREEDY,
    NEW_TOKENS,
    check_batched_equals_sequential,
    check_chat_with_images,
    check_greedy_with_images,
    check_prefill_logits,
    check_rope_positions,
    check_text_only_greedy,
    png_data_url,
)
from server_helpers import live_server
from tiny_qwen_vlm import qwen3_5_vlm_checkpoint
from tiny_vlm import greedy_oracle

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.sampling.params import SamplingParams

pytestmark = pytest.mark.slow

MODEL_NAME = "tiny-qwen3.5-vl"


@pytest.fixture(scope="module", params=["dense", "moe"])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    return qwen3_5_vlm_checkpoint(
        tmp_path_factory.mktemp(f"qwen3_5_vlm_{request.param}"), moe=request.param == "moe"
    )


@pytest.fixture(scope="module")
def llm(checkpoint) -> LLM:
    return LLM(checkpoint.path, device="cpu", show_progress=False)


@pytest.fixture(scope="module")
def oracle(checkpoint):
    import transformers

    config = transformers.AutoConfig.from_pretrained(checkpoint.path)
    model_class = getattr(transformers, config.architectures[0])
    return greedy_oracle(model_class, checkpoint.path)


@pytest.fixture(scope="module")
def hf_processor(checkpoint):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    return Qwen2VLImageProcessorPil.from_pretrained(checkpoint.path)


@pytest.fixture(scope="module")
def prompts(checkpoint, llm: LLM) -> list[tuple[list[int], list[DecodedImage]]]:
    """Three prompts of token ids with one to three images of different sizes (grids
    smaller and larger than the 4 x 4 position table, not square), each image's placeholder
    <|vision_start|><|image_pad|><|vision_end|>."""
    image = [checkpoint.vision_start_token_id, checkpoint.image_token_id]
    image.append(checkpoint.vision_end_token_id)
    encode = llm.tokenizer.encode
    return [
        (
            [*encode("Describe this:"), *image, *encode(" in a few words.")],
            [random_image(64, 100, 1)],
        ),
        (
            [*encode("Compare"), *image, *encode(" and"), *image, *encode(".")],
            [random_image(70, 140, 2), random_image(64, 64, 3)],
        ),
        (
            [*image, *encode("Once"), *image, *image, *encode(" upon a time there was")],
            [random_image(30, 130, 4), random_image(100, 60, 5), random_image(32, 32, 6)],
        ),
    ]


def test_pixels_and_encoder_output_equal_transformers(
    llm: LLM, oracle, hf_processor, prompts
) -> None:
    """Three images of different sizes in one encoder call: the same patches as
    transformers' processor makes (Qwen3.5's mean / std 0.5, 16-pixel patches), and the
    merged tokens within 1e-4 of its vision tower."""
    ids, images = prompts[2]
    ours = llm.engine.make_request(ids, GREEDY, images=images).seqs[0].images
    processed = hf_processor([image.pixels for image in images], return_tensors="pt")
    assert len({tuple(grid) for grid in processed["image_grid_thw"].tolist()}) == 3
    patches = ours.pixel_values.reshape(-1, ours.pixel_values.shape[-1])
    np.testing.assert_allclose(patches, processed["pixel_values"].numpy(), atol=1e-5, rtol=0)
    encoded = llm.runner.encode_images(ours.pixel_values, ours.encoder_layout)
    with torch.no_grad():
        expected = oracle.model.visual(
            processed["pixel_values"], grid_thw=processed["image_grid_thw"]
        ).pooler_output.numpy()
    assert encoded.shape == expected.shape == (sum(ours.lengths), 48)
    np.testing.assert_allclose(encoded, expected, atol=1e-4, rtol=0)


def test_rope_positions_equal_transformers(llm: LLM, oracle, hf_processor, checkpoint, prompts):
    check_rope_positions(llm, oracle, hf_processor, checkpoint, prompts)


def test_prefill_logits_with_images_equal_transformers(
    llm: LLM, oracle, hf_processor, checkpoint, prompts
) -> None:
    check_prefill_logits(llm, oracle, hf_processor, checkpoint, prompts)


def test_greedy_tokens_with_images_equal_transformers(
    llm: LLM, oracle, hf_processor, checkpoint, prompts
) -> None:
    check_greedy_with_images(llm, oracle, hf_processor, checkpoint, prompts)


def test_text_only_greedy_tokens_equal_transformers(llm: LLM, oracle) -> None:
    check_text_only_greedy(llm, oracle)


def test_batched_mixed_requests_equal_sequential(llm: LLM, prompts) -> None:
    """Each sequence with its own recurrent state slot; the image sequences' decode rows in
    the ragged image forward beside the text one's."""
    check_batched_equals_sequential(llm, prompts)


def test_llm_chat_with_images_equals_transformers(
    llm: LLM, oracle, hf_processor, checkpoint
) -> None:
    images = [random_image(50, 80, 7), random_image(64, 40, 8)]
    check_chat_with_images(llm, oracle, hf_processor, checkpoint, images)


def test_openai_client_sends_images_through_serve(llm: LLM, checkpoint) -> None:
    """Two images through a live server on loopback: the engine's answer (`LLM.chat`'s)."""
    images = [random_image(48, 64, 9), random_image(30, 90, 10)]
    parts = [{"type": "image_url", "image_url": {"url": png_data_url(i.pixels)}} for i in images]
    messages = [{"role": "user", "content": [*parts, {"type": "text", "text": "What?"}]}]
    with live_server(checkpoint.path, MODEL_NAME) as server:
        reply = server.client().chat.completions.create(
            model=MODEL_NAME, messages=messages, max_tokens=NEW_TOKENS, temperature=0.0
        )
    expected = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS))[0]
    assert reply.choices[0].message.content == expected.outputs[0].text
    assert reply.usage.prompt_tokens == len(expected.prompt_token_ids)


def test_runtime_spec_records_the_learned_position_layout(llm: LLM, checkpoint) -> None:
    """The tower's layout is the position table's (no windows); a hybrid keeps no prefix
    cache (a cached block holds KV, not the recurrent state after it)."""
    spec = llm.runner.spec
    assert spec.vision is not None and spec.vision.multimodal_rope
    layout = spec.vision.patch_merge
    assert layout is not None
    assert (layout.patch_size, layout.spatial_merge_size, layout.window_size) == (16, 2, 0)
    assert layout.position_embeddings == 16
    assert spec.vision.image_token_id == checkpoint.image_token_id
    assert spec.recurrent_state and not spec.prefix_caching
