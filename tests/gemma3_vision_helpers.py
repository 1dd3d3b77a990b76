"""What the Gemma 3 image tests share: random images, transformers' greedy tokens for an
expanded prompt (the oracle), and running an engine until its requests finish."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers_greedy import greedy_tokens

from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage


def random_image(height: int, width: int, seed: int) -> DecodedImage:
    """An RGB image of random pixels, as the decoder hands it to the engine."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return DecodedImage(pixels=pixels, part_index=0)


def gemma3_oracle(checkpoint: Any) -> Any:
    """transformers' Gemma3ForConditionalGeneration on the checkpoint, fp32, never stopping
    at an end-of-sequence token (so greedy runs give a fixed number of tokens)."""
    import transformers

    model = transformers.Gemma3ForConditionalGeneration.from_pretrained(
        checkpoint.path, dtype=torch.float32
    ).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def oracle_tokens(
    oracle: Any, checkpoint: Any, expanded_ids: list[int], images, new_tokens: int
) -> list[int]:
    """transformers' greedy tokens for the expanded prompt, pixel values from its own
    Gemma 3 image processor and the image rows marked in `token_type_ids`."""
    import transformers

    processor = transformers.Gemma3ImageProcessor.from_pretrained(checkpoint.path)
    pixel_values = processor([image.pixels for image in images], return_tensors="pt")[
        "pixel_values"
    ]
    return greedy_tokens(
        oracle,
        expanded_ids,
        new_tokens,
        pixel_values=pixel_values,
        image_token_id=checkpoint.image_token_id,
    )


def run_to_completion(llm: Any) -> dict:
    """Step the engine until nothing is left; the finished outputs by request id."""
    finished = {}
    while llm.engine.has_unfinished:
        for output in llm.engine.step():
            if output.finished:
                finished[output.request_id] = output
    return finished
