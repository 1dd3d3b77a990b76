"""A Gemma 3 checkpoint in the released layout (the vision tower's tensors under
`vision_tower.vision_model.`, as google's checkpoints and transformers 4 name them) compiles
and loads its vision tower: the encoder's output equals transformers' on the same weights
saved in transformers 5's layout (`vision_tower.`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

from vllm_tvm.entrypoints.llm import LLM

pytestmark = pytest.mark.slow


def _released_layout(source: Path, destination: Path) -> Path:
    for item in source.iterdir():
        if item.suffix != ".safetensors":
            shutil.copy(item, destination / item.name)
    tensors = load_file(str(source / "model.safetensors"))
    renamed = {
        name.replace("vision_tower.", "vision_tower.vision_model.", 1): value
        for name, value in tensors.items()
    }
    assert renamed != tensors
    save_file(renamed, str(destination / "model.safetensors"), metadata={"format": "pt"})
    return destination


def test_released_layout_encoder_equals_transformers(tiny_gemma3_vlm, tmp_path: Path) -> None:
    import transformers

    released = _released_layout(tiny_gemma3_vlm.path, tmp_path)
    llm = LLM(released, device="cpu", show_progress=False)
    size = tiny_gemma3_vlm.image_size
    pixels = np.random.default_rng(1).uniform(-1, 1, size=(2, 3, size, size)).astype(np.float32)
    oracle = transformers.Gemma3ForConditionalGeneration.from_pretrained(
        tiny_gemma3_vlm.path, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        expected = oracle.get_image_features(torch.from_numpy(pixels)).pooler_output.numpy()
    np.testing.assert_allclose(llm.runner.encode_images(pixels), expected, atol=1e-4, rtol=0)
