"""Images through the engine on a tiny random Qwen3_5ForConditionalGeneration (and its MoE
class): the compiled vision tower (learned position table, full attention per frame) fed by
our processor equals transformers' over several images of different sizes, the prompt's
M-RoPE positions equal its `get_rope_index`, and greedy tokens and prefill logits of the
hybrid decoder (Gated DeltaNet layers, gated full attention with interleaved M-RoPE on its
partial rotary) equal transformers' (its own image processor, `image_grid_thw` and
`mm_token_type_ids`), alone and batched with a text-only request; decode after an image
runs at index + rope delta. Every prompt mixes 1 to 3 images of different sizes."""

from __future__ import annotations

import pytest
from engine_helpers import random_image
from qwen2_5_vl_helpers import NEW_TOKENS, QwenImageEngineChecks, image_prompts, image_url_part
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
    """One to three images of different sizes (grids smaller and larger than the 4 x 4
    position table, not square)."""
    return image_prompts(
        checkpoint, llm, (((64, 100),), ((70, 140), (64, 64)), ((30, 130), (100, 60), (32, 32)))
    )


class TestImagesThroughTheEngine(QwenImageEngineChecks):
    """The shared checks (qwen2_5_vl_helpers.py) on the tiny Qwen3.5 / Qwen3.5-MoE: its
    preprocessor's mean / std 0.5 and 16-pixel patches, the hybrid's recurrent state slot
    per sequence beside the image forward's rows."""


def test_openai_client_sends_images_through_serve(llm: LLM, checkpoint) -> None:
    """Two images through a live server on loopback: the engine's answer (`LLM.chat`'s)."""
    images = [random_image(48, 64, 9), random_image(30, 90, 10)]
    parts = [image_url_part(image.pixels) for image in images]
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


def test_video_parts_stay_refused_by_name(llm: LLM) -> None:
    part = {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]
    with pytest.raises(ValueError, match="unsupported content part 'video_url'"):
        llm.chat(messages, SamplingParams(max_tokens=1))
