"""transformers' greedy continuation of a prompt, the token oracle of the engine tests and of
the GPU checks in benchmarks/.

Why one helper: every oracle run must be the same greedy `generate` (no sampling, never
stopping at EOS as the engine runs with `ignore_eos`, on the model's own device), and an
image prompt must mark its image rows in `token_type_ids` as transformers' processor does.
"""

from __future__ import annotations

from typing import Any

import torch


def greedy_tokens(
    model: Any,
    prompt_ids: list[int],
    new_tokens: int,
    *,
    pixel_values: torch.Tensor | None = None,
    image_token_id: int | None = None,
) -> list[int]:
    """The `new_tokens` tokens transformers' `model` generates greedily after `prompt_ids`;
    with `pixel_values` (on the model's device), the prompt's `image_token_id` rows are the
    images' (a Gemma 3 prompt expanded to its soft tokens)."""
    ids = torch.tensor([prompt_ids], device=model.device)
    images: dict[str, torch.Tensor] = {}
    if pixel_values is not None:
        images = {"pixel_values": pixel_values, "token_type_ids": (ids == image_token_id).long()}
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            **images,
        )
    return out[0, len(prompt_ids) :].tolist()


def greedy_continuations(model: Any, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """`greedy_tokens` of each prompt alone."""
    return [greedy_tokens(model, prompt, new_tokens) for prompt in prompts]
