"""POST /v1/completions through the real openai client against a live server.

Specification: a prompt may be a string, a list of strings, token ids or a list of token-id
lists, and text and its token ids give the same completion; choices run prompt-major with
`n`; `echo` prepends the prompt; logprobs are the model's (checked against transformers
running the same checkpoint); streaming yields the same text as the JSON response, with a
usage chunk when asked; `echo` with max_tokens 0 scores the prompt (it and its logprobs,
no generated token; other budgets: test_server_max_tokens.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from server_helpers import MODEL_NAME
from tiny_models import load_oracle

GREEDY = {"temperature": 0.0}


def _ids(server, text: str) -> list[int]:
    return server.ctx.tokenizer.encode(text)


def test_string_prompt_completes_with_usage(client, server):
    result = client.completions.create(model=MODEL_NAME, prompt="Hello world", max_tokens=6)
    [choice] = result.choices
    assert result.object == "text_completion" and result.model == MODEL_NAME
    assert choice.finish_reason in ("stop", "length")
    assert result.usage.prompt_tokens == len(_ids(server, "Hello world"))
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_token_id_prompt_completes_like_its_text(client, server):
    text = "The quick brown fox"
    by_text = client.completions.create(model=MODEL_NAME, prompt=text, max_tokens=8, **GREEDY)
    by_ids = client.completions.create(
        model=MODEL_NAME, prompt=_ids(server, text), max_tokens=8, **GREEDY
    )
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage == by_text.usage


def test_list_of_prompts_gives_prompt_major_choices(client):
    prompts = ["Once upon a time", "Paged attention"]
    result = client.completions.create(
        model=MODEL_NAME, prompt=prompts, max_tokens=3, n=2, echo=True, seed=7
    )
    assert [c.index for c in sorted(result.choices, key=lambda c: c.index)] == [0, 1, 2, 3]
    for choice in result.choices:
        assert choice.text.startswith(prompts[choice.index // 2])


def test_list_of_token_id_prompts_completes_each(client, server):
    prompts = [_ids(server, "Hello"), _ids(server, "The lazy dog")]
    result = client.completions.create(model=MODEL_NAME, prompt=prompts, max_tokens=2, **GREEDY)
    assert len(result.choices) == 2
    assert result.usage.prompt_tokens == sum(len(p) for p in prompts)


def test_echo_prepends_the_prompt(client):
    plain = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=4, **GREEDY)
    echoed = client.completions.create(
        model=MODEL_NAME, prompt="Hello", max_tokens=4, echo=True, **GREEDY
    )
    assert echoed.choices[0].text == "Hello" + plain.choices[0].text


def test_n_2_returns_two_distinct_samples(client):
    result = client.completions.create(
        model=MODEL_NAME, prompt="Hello", max_tokens=12, n=2, seed=3, temperature=1.0
    )
    assert sorted(c.index for c in result.choices) == [0, 1]
    texts = [c.text for c in result.choices]
    assert texts[0] != texts[1]


@pytest.fixture(scope="module")
def oracle(server):
    return load_oracle(server.ctx.config.engine.model)


def test_logprobs_are_the_models_log_softmax(client, server, oracle):
    prompt_ids = _ids(server, "Paged attention keeps keys")
    result = client.completions.create(
        model=MODEL_NAME, prompt=prompt_ids, max_tokens=3, logprobs=2, **GREEDY
    )
    logprobs = result.choices[0].logprobs
    with torch.no_grad():
        logits = oracle(torch.tensor([prompt_ids])).logits[0, -1].double()
    expected = torch.log_softmax(logits, dim=-1).numpy()
    first = int(np.argmax(expected))
    assert server.ctx.token_text(first) == logprobs.tokens[0]
    assert math.isclose(logprobs.token_logprobs[0], expected[first], abs_tol=2e-3)
    top_two = np.argsort(-expected)[:2]
    for token_id in top_two:
        text = server.ctx.token_text(int(token_id))
        assert math.isclose(logprobs.top_logprobs[0][text], expected[token_id], abs_tol=2e-3)


def test_echo_with_logprobs_scores_the_prompt(client, server, oracle):
    prompt_ids = _ids(server, "Once upon a time")
    result = client.completions.create(
        model=MODEL_NAME, prompt=prompt_ids, max_tokens=1, logprobs=1, echo=True, **GREEDY
    )
    logprobs = result.choices[0].logprobs
    assert len(logprobs.tokens) == len(prompt_ids) + 1
    assert logprobs.token_logprobs[0] is None
    with torch.no_grad():
        logits = oracle(torch.tensor([prompt_ids])).logits[0].double()
    expected = torch.log_softmax(logits, dim=-1).numpy()
    for position in range(1, len(prompt_ids)):
        want = expected[position - 1, prompt_ids[position]]
        assert math.isclose(logprobs.token_logprobs[position], want, abs_tol=2e-3)


def test_stream_yields_the_json_text_and_a_usage_chunk(client):
    args = {"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 10, **GREEDY}
    whole = client.completions.create(**args)
    chunks = list(
        client.completions.create(stream=True, stream_options={"include_usage": True}, **args)
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == [whole.choices[0].finish_reason]


def test_stop_string_ends_the_completion_before_it(client):
    forced = "alpha beta gamma delta"
    result = client.completions.create(
        model=MODEL_NAME,
        prompt="Hello",
        stop=[" gamma"],
        extra_body={"structured_outputs": {"choice": [forced]}},
    )
    assert result.choices[0].text == "alpha beta"
    assert result.choices[0].finish_reason == "stop"


def test_default_max_tokens_is_16(client):
    result = client.completions.create(
        model=MODEL_NAME, prompt="Hello", extra_body={"ignore_eos": True}
    )
    assert result.usage.completion_tokens == 16
    assert result.choices[0].finish_reason == "length"
