"""Gemma 3's vision tower compiled into the artifact (model_defs/gemma3_multimodal.py): the
compiled `encode_images` (SigLIP encoder, average pooling, multimodal projector) equals
transformers' `get_image_features` on a tiny random `Gemma3ForConditionalGeneration`, and
the manifest's runtime spec describes the encoder and the image tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_vlm import GEMMA3_IMAGE_TOKENS

from vllm_tvm.entrypoints.llm import LLM

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tiny_gemma3_vlm):
    return tiny_gemma3_vlm


@pytest.fixture(scope="module")
def llm(checkpoint) -> LLM:
    return LLM(checkpoint.path, device="cpu", show_progress=False)


def test_encoder_output_equals_transformers(checkpoint, llm: LLM) -> None:
    import transformers

    rng = np.random.default_rng(0)
    size = checkpoint.image_size
    pixels = rng.uniform(-1, 1, size=(3, 3, size, size)).astype(np.float32)
    ours = llm.runner.encode_images(pixels)
    oracle = transformers.Gemma3ForConditionalGeneration.from_pretrained(
        checkpoint.path, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        expected = oracle.get_image_features(torch.from_numpy(pixels)).pooler_output.numpy()
    assert ours.shape == expected.shape == (3, GEMMA3_IMAGE_TOKENS, checkpoint.text_hidden)
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=0)


def test_runtime_spec_records_the_encoder_and_image_tokens(checkpoint, llm: LLM) -> None:
    vision = llm.runner.spec.vision
    assert vision is not None
    assert vision.encoder_function in llm.runner.manifest.functions
    assert vision.image_size == (checkpoint.image_size, checkpoint.image_size)
    assert vision.tokens_per_image == GEMMA3_IMAGE_TOKENS
    assert vision.image_token_id == checkpoint.image_token_id
    assert vision.bidirectional_image_attention
    # Its sliding layers switch prefix caching off (images alone do not:
    # test_gemma3_vision_prefix_cache.py).
    assert not llm.runner.spec.prefix_caching
