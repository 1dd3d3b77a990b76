"""What the Qwen2.5-VL and Qwen3.5 image tests share: transformers' inputs for an expanded
prompt (its own image processor, `image_grid_thw`, `mm_token_type_ids`), its greedy tokens
with each step's log-probability (the oracle: the tiny models' greedy tokens alone hardly
move with the positions, their log-probabilities do), and the checks both families pass
through the engine (`check_*`: prompts are (token ids, images) pairs whose images sit at
<|vision_start|><|image_pad|><|vision_end|>)."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import torch
from engine_helpers import assert_all_blocks_free, image_prefill_logits, run_to_completion
from PIL import Image

from vllm_tvm.runtime.sampling.params import SamplingParams

NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
TEXT_PROMPT = "Paged attention keeps keys and values in blocks"


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


def check_rope_positions(llm, oracle, hf_processor, checkpoint, prompts) -> None:
    """Each prompt's M-RoPE positions and rope delta equal transformers' `get_rope_index`."""
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


def check_greedy_with_images(llm, oracle, hf_processor, checkpoint, prompts) -> None:
    """The tokens equal transformers', and so does every step's log-probability of its
    token (within 1e-4): the decode steps run at index + rope delta."""
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=0)
    for ids, images in prompts:
        expanded = llm.engine.make_request(ids, GREEDY, images=images).prompt_token_ids
        request_id = llm.engine.add_request(None, ids, params, images=images)
        ours = run_to_completion(llm)[request_id].outputs[0]
        inputs = hf_inputs(hf_processor, checkpoint, list(expanded), images)
        expected, expected_logprobs = oracle_greedy(oracle, inputs, NEW_TOKENS)
        assert ours.token_ids == expected
        logprobs = [entry.logprob for entry in ours.logprobs]
        np.testing.assert_allclose(logprobs, expected_logprobs, atol=1e-4, rtol=0)
    assert_all_blocks_free(llm)


def check_prefill_logits(llm, oracle, hf_processor, checkpoint, prompts) -> None:
    """Each prompt's prefill logits at every position within 1e-4 of transformers'."""
    for ids, images in prompts:
        expanded, ours = image_prefill_logits(llm, ids, images, rope=True)
        inputs = hf_inputs(hf_processor, checkpoint, expanded, images)
        oracle.model.rope_deltas = None
        with torch.no_grad():
            expected = oracle(**inputs).logits[0]
        np.testing.assert_allclose(ours, expected.numpy(), atol=1e-4, rtol=0)


def check_text_only_greedy(llm, oracle) -> None:
    """Without images every forward rotates at the cache's positions (plain RoPE is M-RoPE
    at equal streams)."""
    ids = llm.tokenizer.encode(TEXT_PROMPT)
    request_id = llm.engine.add_request(None, ids, GREEDY)
    ours = run_to_completion(llm)[request_id].outputs[0].token_ids
    expected, _ = oracle_greedy(oracle, hf_inputs(None, None, ids, []), NEW_TOKENS)
    assert ours == expected


def check_batched_equals_sequential(llm, prompts) -> None:
    """The image prompts and a text-only one together equal each alone."""
    requests = [prompts[0], (llm.tokenizer.encode(TEXT_PROMPT), []), *prompts[1:]]
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


def png_data_url(pixels: np.ndarray) -> str:
    """A data: URL of `pixels` as a PNG."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def check_chat_with_images(llm, oracle, hf_processor, checkpoint, images) -> None:
    """`LLM.chat` with `images` as `image_url` data: URLs: the prompt is the chat template
    with each image part as <|vision_start|><|image_pad|><|vision_end|> (parts joined by
    newlines, as vLLM joins them for a template that takes text) and each pad repeated as
    transformers' processor does; the tokens equal transformers'."""
    parts = [{"type": "image_url", "image_url": {"url": png_data_url(i.pixels)}} for i in images]
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
    inputs = hf_inputs(hf_processor, checkpoint, expanded, images)
    expected, _ = oracle_greedy(oracle, inputs, NEW_TOKENS)
    assert ours.outputs[0].token_ids == expected
