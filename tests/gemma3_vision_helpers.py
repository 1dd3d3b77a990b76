"""What the Gemma 3 image tests share: transformers' model and its greedy tokens for an
expanded prompt (the oracle)."""

from __future__ import annotations

from typing import Any

from tiny_vlm import greedy_oracle
from transformers_greedy import greedy_tokens


def gemma3_oracle(checkpoint: Any) -> Any:
    """transformers' Gemma3ForConditionalGeneration on the checkpoint, fp32, never stopping
    at an end-of-sequence token (so greedy runs give a fixed number of tokens)."""
    import transformers

    return greedy_oracle(transformers.Gemma3ForConditionalGeneration, checkpoint.path)


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
