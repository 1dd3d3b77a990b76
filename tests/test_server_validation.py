"""Request validation at the server's edge, through the real openai client and plain HTTP
against a live server.

Specification (vLLM's surface): `max_tokens` below 1 is a 400 naming the value, except that
a completion with `echo` and `max_tokens` 0 scores the prompt (returns it, with its
logprobs, and no generated token).
"""

from __future__ import annotations

import httpx2 as httpx
import openai
import pytest
from server_helpers import MODEL_NAME

CHAT = [{"role": "user", "content": "Hello"}]


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert error["code"] == status
    return error


# ---------------------------------------------------------------------------------- max_tokens


@pytest.mark.parametrize(
    "budget", [{"max_tokens": 0}, {"max_tokens": -1}, {"max_completion_tokens": 0}]
)
def test_chat_max_tokens_below_one_is_a_400_naming_the_value(client, budget):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL_NAME, messages=CHAT, **budget)
    value = next(iter(budget.values()))
    assert f"max_tokens must be at least 1, got {value}" in caught.value.body["message"]


def test_echo_with_max_tokens_0_returns_the_prompt_and_its_logprobs(client, server):
    prompt = "The quick brown fox"
    result = client.completions.create(
        model=MODEL_NAME, prompt=prompt, echo=True, max_tokens=0, logprobs=2, timeout=30
    )
    [choice] = result.choices
    ids = server.ctx.tokenizer.encode(prompt)
    assert choice.text == prompt and choice.finish_reason == "length"
    assert result.usage.completion_tokens == 0 and result.usage.prompt_tokens == len(ids)
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == len(ids)
    assert logprobs.token_logprobs[0] is None
    assert all(isinstance(value, float) for value in logprobs.token_logprobs[1:])


def test_echo_with_max_tokens_0_streams_only_the_prompt(client):
    prompts = ["Once upon", "a time"]
    stream = client.completions.create(
        model=MODEL_NAME, prompt=prompts, echo=True, max_tokens=0, stream=True, timeout=30
    )
    texts: dict[int, str] = {}
    finished = {}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason is not None:
                finished[choice.index] = choice.finish_reason
    assert texts == {0: prompts[0], 1: prompts[1]}
    assert finished == {0: "length", 1: "length"}


def test_echo_with_max_tokens_0_without_logprobs_has_none(client):
    result = client.completions.create(
        model=MODEL_NAME, prompt="Hello", echo=True, max_tokens=0, timeout=30
    )
    assert result.choices[0].text == "Hello" and result.choices[0].logprobs is None
    assert result.usage.completion_tokens == 0
