"""N-gram speculative decoding (two drafts a step) on the tiny random Gemma 3 and
Qwen2.5-VL conditional-generation checkpoints, an image request and a text-only one in one
batch: greedy tokens and every step's log-probability equal transformers' greedy generate
(its own image processor). On Gemma 3 the verify forward must keep decode's causal mask
(an image's soft tokens attend both ways only in prefill); on Qwen2.5-VL it must run the
image request at index + rope delta on the M-RoPE layers. The text prompt repeats itself,
so n-gram drafts are made and some accepted."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from engine_helpers import assert_all_blocks_free, random_image
from gemma3_vision_helpers import gemma3_oracle
from qwen2_5_vl_helpers import hf_inputs, image_prompts, oracle_greedy
from vlm_speculative_helpers import (
    SpeculativeRequest,
    assert_batch_equals_oracle,
    greedy_with_logprobs,
)

from vllm_tvm.entrypoints.llm import LLM

pytestmark = pytest.mark.slow

NEW_TOKENS = 16
DRAFTS_PER_STEP = 2
NGRAM = {"method": "ngram", "prompt_lookup_min": 1, "num_speculative_tokens": DRAFTS_PER_STEP}
REPEATING_TEXT = "the cat sat on the mat, the cat sat on the mat, the cat sat on the mat,"


@dataclass(frozen=True)
class Family:
    """A checkpoint, transformers' model on it and the (prompt ids, images) of its image
    request."""

    checkpoint: Any
    oracle: Any
    image_request: tuple[list[int], list]


def gemma3_inputs(checkpoint: Any, expanded_ids: list[int], images: list) -> dict:
    """transformers' Gemma 3 inputs: its image processor's pixels, the soft-token rows
    marked in `token_type_ids`."""
    import transformers

    inputs = hf_inputs(None, None, expanded_ids, [])
    processor = transformers.Gemma3ImageProcessor.from_pretrained(checkpoint.path)
    pixels = processor([image.pixels for image in images], return_tensors="pt")
    inputs["pixel_values"] = pixels["pixel_values"]
    inputs["token_type_ids"] = (inputs["input_ids"] == checkpoint.image_token_id).long()
    return inputs


@pytest.fixture(scope="module", params=["gemma3", "qwen2_5_vl"])
def family(request: pytest.FixtureRequest) -> Family:
    if request.param == "gemma3":
        checkpoint = request.getfixturevalue("tiny_gemma3_vlm")
        llm = LLM(checkpoint.path, device="cpu", show_progress=False)
        encode = llm.tokenizer.encode
        ids = [*encode("Describe this:"), checkpoint.boi_token_id, *encode(" in a few words.")]
        image_request = (ids, [random_image(40, 30, 1)])
        return Family(checkpoint, gemma3_oracle(checkpoint), image_request)
    checkpoint = request.getfixturevalue("tiny_qwen2_5_vlm")
    llm = LLM(checkpoint.path, device="cpu", show_progress=False)
    image_request = image_prompts(checkpoint, llm, (((60, 45),), ((70, 120),), ((30, 30),)))[0]
    return Family(checkpoint, request.getfixturevalue("tiny_qwen2_5_vlm_oracle"), image_request)


@pytest.fixture(scope="module")
def speculative_llm(family: Family) -> Iterator[LLM]:
    llm = LLM(family.checkpoint.path, device="cpu", show_progress=False, speculative_config=NGRAM)
    yield llm
    assert_all_blocks_free(llm)


def expected_requests(family: Family, llm: LLM) -> list[SpeculativeRequest]:
    """The repeating text request and the image request with transformers' greedy tokens and
    log-probabilities."""
    ids, images = family.image_request
    request = llm.engine.make_request(ids, greedy_with_logprobs(NEW_TOKENS), images=images)
    expanded = list(request.prompt_token_ids)
    if hasattr(family.checkpoint, "boi_token_id"):
        image_inputs = gemma3_inputs(family.checkpoint, expanded, images)
    else:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        processor = Qwen2VLImageProcessorPil.from_pretrained(family.checkpoint.path)
        image_inputs = hf_inputs(processor, family.checkpoint, expanded, images)
    text = llm.tokenizer.encode(REPEATING_TEXT)
    text_inputs = hf_inputs(None, None, text, [])
    return [
        (text, [], oracle_greedy(family.oracle, text_inputs, NEW_TOKENS)),
        (ids, images, oracle_greedy(family.oracle, image_inputs, NEW_TOKENS)),
    ]


@pytest.mark.parametrize("join_after", [0, 3], ids=["together", "image_joins_later"])
def test_ngram_drafts_change_no_greedy_token_of_image_and_text_requests(
    family: Family, speculative_llm: LLM, join_after: int
) -> None:
    """The text request first; joining later, the image request starts while the text
    request is speculating. Whether its prefill shares a forward with the text request's
    verify depends on the schedule: nothing here shows it does (dropping the images from
    the verify batch still passes), so that case is not covered yet."""
    text, image = expected_requests(family, speculative_llm)
    _, accepted = assert_batch_equals_oracle(
        speculative_llm, [text, image], NEW_TOKENS, DRAFTS_PER_STEP, join_after
    )
    assert accepted > 0
