"""The output budget on a live server, with the real openai client.

Specification (the reference server's, mirroring vLLM): a non-positive `max_tokens` (or
`max_completion_tokens` on chat, which takes precedence) is unset, and unset generates up to
`max_model_len` minus the prompt; `echo` with `max_tokens` 0 on completions still scores the
prompt only (test_server_validation.py); a positive budget larger than the context left is
vLLM's 400 naming both lengths; $VT_SERVER_MAX_NEW_TOKENS caps every budget.

The engine here has a 64-token context, so running a request to its context end is cheap;
`ignore_eos` keeps the random model from stopping early.
"""

from __future__ import annotations

import openai
import pytest
from server_helpers import MODEL_NAME, start_farm

from vllm_tvm.cli.main import build_parser
from vllm_tvm.cli.serve_cmd import config_from_args

CONTEXT = 64
PROMPT = "Once upon a time"
TO_THE_END = {"extra_body": {"ignore_eos": True}, "temperature": 0.0}


@pytest.fixture(scope="module")
def farm(server_farm):
    farm = start_farm(server_farm.model_dir, max_model_len=CONTEXT)
    yield farm
    farm.stop()


@pytest.fixture(scope="module")
def client(farm):
    return farm.server().client()


def _completion(client, **budget):
    return client.completions.create(model=MODEL_NAME, prompt=PROMPT, **budget, **TO_THE_END)


def _chat(client, **budget):
    messages = [{"role": "user", "content": PROMPT}]
    return client.chat.completions.create(
        model=MODEL_NAME, messages=messages, **budget, **TO_THE_END
    )


@pytest.mark.parametrize("max_tokens", [0, -1])
def test_non_positive_completion_budget_runs_to_the_context(client, max_tokens) -> None:
    result = _completion(client, max_tokens=max_tokens)
    assert result.usage.completion_tokens == CONTEXT - result.usage.prompt_tokens
    assert result.choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    "budget",
    [
        {"max_tokens": -1},
        {"max_tokens": 0},
        {"max_completion_tokens": 0},
        {"max_completion_tokens": -1, "max_tokens": 3},  # the newer field wins, unset
    ],
)
def test_non_positive_chat_budget_runs_to_the_context(client, budget) -> None:
    result = _chat(client, **budget)
    assert result.usage.completion_tokens == CONTEXT - result.usage.prompt_tokens
    assert result.choices[0].finish_reason == "length"


def test_a_budget_that_fills_the_context_exactly_is_served(client) -> None:
    prompt_tokens = _completion(client, max_tokens=1).usage.prompt_tokens
    result = _completion(client, max_tokens=CONTEXT - prompt_tokens)
    assert result.usage.completion_tokens == CONTEXT - prompt_tokens


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_a_budget_past_the_context_is_vllms_400_naming_both_lengths(client, route) -> None:
    call = _completion if route == "completions" else _chat
    prompt_tokens = call(client, max_tokens=1).usage.prompt_tokens
    too_many = CONTEXT - prompt_tokens + 1
    budget = (
        {"max_tokens": too_many} if route == "completions" else {"max_completion_tokens": too_many}
    )
    with pytest.raises(openai.BadRequestError) as caught:
        call(client, **budget)
    assert caught.value.body["message"] == (
        f"'max_tokens' or 'max_completion_tokens' is too large: {too_many}. This model's "
        f"maximum context length is {CONTEXT} tokens and your request has {prompt_tokens} "
        f"input tokens ({too_many} > {CONTEXT} - {prompt_tokens})."
    )


@pytest.mark.parametrize(("requested", "served"), [(-1, 5), (None, 5), (3, 3), (10, 5)])
def test_the_serving_side_ceiling_caps_every_budget(farm, requested, served) -> None:
    client = farm.server(max_new_tokens=5).client()
    budget = {} if requested is None else {"max_tokens": requested}
    assert _chat(client, **budget).usage.completion_tokens == served
    if requested is not None:
        assert _completion(client, **budget).usage.completion_tokens == served


def test_the_ceiling_comes_from_vt_server_max_new_tokens(monkeypatch) -> None:
    parser = build_parser()
    monkeypatch.setenv("VT_SERVER_MAX_NEW_TOKENS", "7")
    assert config_from_args(parser.parse_args(["serve", "/m"])).max_new_tokens == 7
    monkeypatch.setenv("VT_SERVER_MAX_NEW_TOKENS", "many")
    with pytest.raises(ValueError, match="VT_SERVER_MAX_NEW_TOKENS must be a whole number"):
        config_from_args(parser.parse_args(["serve", "/m"]))
    monkeypatch.delenv("VT_SERVER_MAX_NEW_TOKENS")
    assert config_from_args(parser.parse_args(["serve", "/m"])).max_new_tokens is None
