"""Speculative decoding on a tiny random Qwen3_5ForConditionalGeneration (and its MoE
class) with an `mtp.*` layer (the released checkpoints' layout): n-gram and MTP drafts, one
and two a step, with an image request and a text-only one in one batch. Greedy tokens and
every step's log-probability equal transformers' greedy generate (its own image processor);
the log-probabilities move with the positions where the tiny model's tokens hardly do, so
they check that an image request's verify forward, like its decode, runs at index + rope
delta on the M-RoPE layers, and that its rejected drafts leave no trace in the recurrent
state. Per class one plain build (n-grams), one target with hidden states and one MTP
layer build."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from engine_helpers import assert_all_blocks_free
from hybrid_checkpoints import add_mtp_layer
from qwen2_5_vl_helpers import NEW_TOKENS, TEXT_PROMPT, hf_inputs, image_prompts, oracle_greedy
from speculative_scenarios import assert_head_cache_empty
from tiny_qwen_vlm import qwen3_5_vlm_checkpoint
from tiny_vlm import greedy_oracle
from vlm_speculative_helpers import assert_batch_equals_oracle, greedy_with_logprobs

from vllm_tvm.artifacts.speculative_roles import HYBRID_MTP_ARCHITECTURE
from vllm_tvm.entrypoints.llm import LLM

pytestmark = pytest.mark.slow

GREEDY_WITH_LOGPROBS = greedy_with_logprobs(NEW_TOKENS)
METHODS = {
    "ngram": {"method": "ngram", "prompt_lookup_min": 1},
    "mtp": {"method": "mtp"},
}


@pytest.fixture(scope="module", params=["dense", "moe"])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    return qwen3_5_vlm_checkpoint(
        tmp_path_factory.mktemp(f"qwen3_5_vlm_{request.param}_mtp"), moe=request.param == "moe"
    )


@pytest.fixture(scope="module")
def oracle(checkpoint):
    """transformers' model, loaded before the MTP layer is written (it reads no `mtp.*`)."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(checkpoint.path)
    model_class = getattr(transformers, config.architectures[0])
    model = greedy_oracle(model_class, checkpoint.path)
    add_mtp_layer(checkpoint.path, model)
    return model


@pytest.fixture(scope="module")
def requests_and_expected(checkpoint, oracle) -> list[tuple[list[int], list, tuple]]:
    """(prompt ids, images, transformers' greedy tokens and log-probabilities) of a prompt
    with two images and of a text-only one."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    hf_processor = Qwen2VLImageProcessorPil.from_pretrained(checkpoint.path)
    llm = LLM(checkpoint.path, device="cpu", show_progress=False)
    ids, images = image_prompts(
        checkpoint, llm, (((64, 100),), ((70, 140), (64, 64)), ((32, 32),))
    )[1]
    expanded = list(
        llm.engine.make_request(ids, GREEDY_WITH_LOGPROBS, images=images).prompt_token_ids
    )
    text = llm.tokenizer.encode(TEXT_PROMPT)
    return [
        (
            ids,
            images,
            oracle_greedy(
                oracle, hf_inputs(hf_processor, checkpoint, expanded, images), NEW_TOKENS
            ),
        ),
        (text, [], oracle_greedy(oracle, hf_inputs(None, None, text, []), NEW_TOKENS)),
    ]


@pytest.fixture
def make_speculative_llm(checkpoint, oracle) -> Iterator[Any]:
    """Factory of LLMs drafting by `method` (METHODS), `k` drafts a step; all blocks (and
    the MTP layer's cache) free after."""
    made: list[LLM] = []

    def make(method: str, k: int) -> LLM:
        spec = {**METHODS[method], "num_speculative_tokens": k}
        made.append(
            LLM(checkpoint.path, device="cpu", show_progress=False, speculative_config=spec)
        )
        return made[-1]

    yield make
    for llm in made:
        assert_all_blocks_free(llm)
        if llm.engine.speculator.draft is not None:  # MTP: the layer's own KV cache
            assert_head_cache_empty(llm)


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("method", list(METHODS))
def test_drafts_change_no_greedy_token_of_image_and_text_requests(
    method: str, k: int, make_speculative_llm, requests_and_expected
) -> None:
    llm = make_speculative_llm(method, k)
    if method == "mtp":
        assert llm.engine.speculator.draft.runner.manifest.architecture == HYBRID_MTP_ARCHITECTURE
    assert_batch_equals_oracle(llm, requests_and_expected, NEW_TOKENS, k)
