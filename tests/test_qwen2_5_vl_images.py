"""Images through the engine on a tiny random Qwen2_5_VLForConditionalGeneration: the
compiled vision tower (window attention, 2-D rotary, patch merger) equals transformers'
over several images of different sizes, the prompt's M-RoPE positions equal its
`get_rope_index`, and greedy tokens and prefill logits equal transformers' (its own image
processor, `image_grid_thw` and `mm_token_type_ids`), alone and batched with text-only
requests; decode after an image runs at index + rope delta."""

from __future__ import annotations

import pytest
from engine_helpers import random_image
from qwen2_5_vl_helpers import GREEDY, QwenImageEngineChecks, image_prompts

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
    """One to three images of different sizes (one larger than a window, one not a whole
    number of windows)."""
    return image_prompts(
        checkpoint, llm, (((60, 45),), ((70, 120), (56, 56)), ((20, 100), (90, 60), (30, 30)))
    )


class TestImagesThroughTheEngine(QwenImageEngineChecks):
    """The shared checks (qwen2_5_vl_helpers.py) on the tiny Qwen2.5-VL."""


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
