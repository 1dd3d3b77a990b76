"""What the Qwen2.5-VL and Qwen3.5 image tests share: transformers' inputs for an expanded
prompt (its own image processor, `image_grid_thw`, `mm_token_type_ids`), its greedy tokens
with each step's log-probability (the oracle: the tiny models' greedy tokens alone hardly
move with the positions, their log-probabilities do), and the tests both families run
through the engine (`QwenImageEngineChecks`)."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import torch
from engine_helpers import (
    assert_all_blocks_free,
    image_prefill_logits,
    random_image,
    run_to_completion,
)
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


def image_prompts(checkpoint, llm, sizes) -> list[tuple[list[int], list]]:
    """Three prompts of token ids with the images of `sizes` (three tuples of one, two and
    three (height, width)), each image's placeholder
    <|vision_start|><|image_pad|><|vision_end|>: an image inside text, two between words,
    and three with one at the very start."""
    image = [checkpoint.vision_start_token_id, checkpoint.image_token_id]
    image.append(checkpoint.vision_end_token_id)
    encode = llm.tokenizer.encode
    texts = [
        [*encode("Describe this:"), *image, *encode(" in a few words.")],
        [*encode("Compare"), *image, *encode(" and"), *image, *encode(".")],
        [*image, *encode("Once"), *image, *image, *encode(" upon a time there was")],
    ]
    seeds = iter(range(1, 7))
    return [
        (ids, [random_image(height, width, next(seeds)) for height, width in prompt_sizes])
        for ids, prompt_sizes in zip(texts, sizes, strict=True)
    ]


class QwenImageEngineChecks:
    """The image tests both Qwen families run through the engine; a test module subclasses
    it and supplies the fixtures `llm`, `oracle` (transformers' model), `hf_processor`
    (its image processor), `checkpoint` (tiny_qwen_vlm.TinyQwenVLM) and `prompts`
    ((token ids, images) pairs, one to three images of different sizes each; the last
    with three)."""

    def test_encoder_output_equals_transformers(self, llm, oracle, hf_processor, prompts):
        """The last prompt's images in one encoder call: the same patches as transformers'
        processor makes (≤ 1e-5), and the merged tokens within 1e-4 of its vision tower."""
        ids, images = prompts[-1]
        ours = llm.engine.make_request(ids, GREEDY, images=images).seqs[0].images
        processed = hf_processor([image.pixels for image in images], return_tensors="pt")
        patches = ours.pixel_values.reshape(-1, ours.pixel_values.shape[-1])
        np.testing.assert_allclose(patches, processed["pixel_values"].numpy(), atol=1e-5, rtol=0)
        encoded = llm.runner.encode_images(ours.pixel_values, ours.encoder_layout)
        with torch.no_grad():
            expected = oracle.model.visual(
                processed["pixel_values"], grid_thw=processed["image_grid_thw"]
            ).pooler_output.numpy()
        width = oracle.config.text_config.hidden_size
        assert encoded.shape == expected.shape == (sum(ours.lengths), width)
        np.testing.assert_allclose(encoded, expected, atol=1e-4, rtol=0)

    def test_rope_positions_equal_transformers(
        self, llm, oracle, hf_processor, checkpoint, prompts
    ):
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

    def test_greedy_tokens_with_images_equal_transformers(
        self, llm, oracle, hf_processor, checkpoint, prompts
    ):
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

    def test_prefill_logits_with_images_equal_transformers(
        self, llm, oracle, hf_processor, checkpoint, prompts
    ):
        """Each prompt's prefill logits at every position within 1e-4 (fp32)."""
        for ids, images in prompts:
            expanded, ours = image_prefill_logits(llm, ids, images, rope=True)
            inputs = hf_inputs(hf_processor, checkpoint, expanded, images)
            oracle.model.rope_deltas = None
            with torch.no_grad():
                expected = oracle(**inputs).logits[0]
            np.testing.assert_allclose(ours, expected.numpy(), atol=1e-4, rtol=0)

    def test_text_only_greedy_tokens_equal_transformers(self, llm, oracle):
        """Without images every forward rotates at the cache's positions (plain RoPE is
        M-RoPE at equal streams)."""
        ids = llm.tokenizer.encode(TEXT_PROMPT)
        request_id = llm.engine.add_request(None, ids, GREEDY)
        ours = run_to_completion(llm)[request_id].outputs[0].token_ids
        expected, _ = oracle_greedy(oracle, hf_inputs(None, None, ids, []), NEW_TOKENS)
        assert ours == expected

    def test_batched_mixed_requests_equal_sequential(self, llm, prompts):
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

    def test_a_text_prompt_expands_its_image_pads(self, llm, prompts):
        """The chat's placeholder in a text prompt expands as the processor does: the same
        ids as the token-id prompt."""
        ids, images = prompts[1]
        text = llm.tokenizer.decode(ids, skip_special_tokens=False)
        from_text = llm.engine.make_request(text, GREEDY, images=images).prompt_token_ids
        assert from_text == llm.engine.make_request(ids, GREEDY, images=images).prompt_token_ids
        assert llm.engine.intake.image_intake.placeholder == (
            "<|vision_start|><|image_pad|><|vision_end|>"
        )

    def test_llm_chat_with_images_equals_transformers(self, llm, oracle, hf_processor, checkpoint):
        """`LLM.chat` with two `image_url` data: URLs: the prompt is the chat template with
        each image part as <|vision_start|><|image_pad|><|vision_end|> (parts joined by
        newlines, as vLLM joins them for a template that takes text) and each pad repeated
        as transformers' processor does; the tokens equal transformers'."""
        images = [random_image(50, 80, 7), random_image(64, 40, 8)]
        parts = [image_url_part(image.pixels) for image in images]
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


def image_url_part(pixels: np.ndarray) -> dict:
    """An OpenAI `image_url` content part holding `pixels` as a PNG data: URL."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}
