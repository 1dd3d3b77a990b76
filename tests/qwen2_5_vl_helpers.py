"""What the Qwen2.5-VL image tests share: transformers' inputs for an expanded prompt (its own
image processor, `image_grid_thw`, `mm_token_type_ids`) and its greedy tokens with each
step's log-probability (the oracle: the tiny model's greedy tokens alone hardly move with
the positions, its log-probabilities do)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def hf_inputs(hf_processor: Any, checkpoint: Any, expanded_ids: list[int], images) -> dict:
    """transformers' model inputs for the expanded prompt and its images (none: text only)."""
    ids = torch.tensor([expanded_ids])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if images:
        processed = hf_processor([image.pixels for image in images], return_tensors="pt")
        inputs["pixel_values"] = processed["pixel_values"]
        inputs["image_grid_thw"] = processed["image_grid_thw"]
        inputs["mm_token_type_ids"] = (ids == checkpoint.image_token_id).int()
    return inputs


def oracle_greedy(oracle: Any, inputs: dict, new_tokens: int) -> tuple[list[int], np.ndarray]:
    """transformers' `new_tokens` greedy tokens after `inputs` and each one's log-probability."""
    oracle.model.rope_deltas = None  # transformers keeps the last call's
    with torch.no_grad():
        out = oracle.generate(
            **inputs,
            max_new_tokens=new_tokens,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    tokens = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
    steps = torch.log_softmax(torch.cat(out.logits), dim=-1)
    return tokens, steps[torch.arange(new_tokens), torch.tensor(tokens)].numpy()
