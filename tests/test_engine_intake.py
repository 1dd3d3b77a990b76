"""Request intake: what is refused before a request is queued, and by which error."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_tvm.runtime.engine.intake import EmptyPromptError, PromptTooLongError, RequestIntake
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.sampling.params import SamplingParams


@pytest.fixture
def intake() -> RequestIntake:
    """Token-id prompts (no tokenizer), a 100-token vocabulary, 16-token serving length."""
    return RequestIntake(None, [2], max_model_len=16, vocab_size=100)


def test_an_empty_prompt_is_refused_as_empty_not_as_too_long(intake: RequestIntake) -> None:
    with pytest.raises(EmptyPromptError, match="empty") as refused:
        intake.make_request([], SamplingParams())
    assert not isinstance(refused.value, PromptTooLongError)
    assert isinstance(refused.value, ValueError)  # the server answers 400


def test_a_prompt_at_the_serving_length_is_too_long(intake: RequestIntake) -> None:
    with pytest.raises(PromptTooLongError, match=r"length 16\).*length of 16"):
        intake.make_request(list(range(16)), SamplingParams())


def test_n_completions_make_n_sequences_seeded_seed_plus_index(intake: RequestIntake) -> None:
    request = intake.make_request([5, 6, 7], SamplingParams(n=3, seed=10, prompt_logprobs=1))
    assert [seq.params.seed for seq in request.seqs] == [10, 11, 12]
    assert [seq.params.prompt_logprobs for seq in request.seqs] == [1, None, None]
    assert request.request_id == "0"


def test_images_for_a_text_only_model_are_refused_by_name(intake: RequestIntake) -> None:
    image = DecodedImage(np.zeros((4, 4, 3), np.uint8), 0)
    with pytest.raises(ValueError, match="this model takes text only"):
        intake.make_request([1, 2, 3], SamplingParams(), images=[image])
