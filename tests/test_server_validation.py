"""Request validation at the server's edge, through the real openai client and plain HTTP
against a live server.

Specification (vLLM's surface): a completion with `echo` and `max_tokens` 0 scores the
prompt (returns it, with its logprobs, and no generated token; other non-positive budgets
are unset: test_server_max_tokens.py); text holding a lone surrogate anywhere in a body is a 400
naming the field, never a 500; `stream` is a strict boolean that `stream_options` needs;
error messages are bounded whatever the input; a body over `--max-request-body-bytes` is a
413 before it is parsed.
"""

from __future__ import annotations

import json

import httpx2 as httpx
import pytest
from pydantic import ValidationError
from server_helpers import MODEL_NAME, error_body

from vllm_tvm.server.errors import MAX_ERROR_MESSAGE_CHARS
from vllm_tvm.server.protocol import MAX_LOGIT_BIAS_KEYS, ChatCompletionRequest

CHAT = [{"role": "user", "content": "Hello"}]


def _post_escaped(url: str, body: dict) -> httpx.Response:
    """POST `body` as JSON with every non-ASCII character escaped (lone surrogates included)."""
    return httpx.post(url, content=json.dumps(body), headers={"content-type": "application/json"})


# ---------------------------------------------------------------------------------- max_tokens


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


# ---------------------------------------------------------------------------- lone surrogates

SURROGATE_CASES = [
    ("/v1/completions", {"prompt": "a\ud800b"}, "prompt"),
    ("/v1/completions", {"prompt": ["ok", "\ud800"]}, "prompt[1]"),
    ("/v1/completions", {"prompt": "ok", "stop": ["\udfff"]}, "stop[0]"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "\ud800"}]},
     "messages[0].content"),
    ("/v1/chat/completions", {"messages": CHAT, "stream": True, "user": "\ud800"}, "user"),
    ("/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"type": "text", "text": "x\ud800"}]}]},
     "messages[0].content[0].text"),
    ("/tokenize", {"prompt": "\ud800"}, "prompt"),
    ("/tokenize", {"messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "field"), SURROGATE_CASES)
def test_lone_surrogate_escape_is_a_400_naming_the_field(server, path, body, field):
    response = _post_escaped(server.url + path, {"model": MODEL_NAME, **body})
    error = error_body(response, 400)
    assert error["type"] == "BadRequestError"
    assert error["message"].startswith(f"{field}: ") and "surrogate" in error["message"]
    assert error["param"] == field


@pytest.mark.parametrize("path", ["/v1/completions", "/tokenize"])
def test_lone_surrogate_as_raw_bytes_is_a_400(server, path):
    body = b'{"prompt": "a\xed\xa0\x80b", "max_tokens": 2}'
    response = httpx.post(
        server.url + path, content=body, headers={"content-type": "application/json"}
    )
    assert error_body(response, 400)["param"] == "prompt"


def test_valid_astral_characters_are_accepted(client):
    result = client.completions.create(model=MODEL_NAME, prompt="emoji \U0001f600", max_tokens=2)
    assert result.usage.prompt_tokens > 0


# ------------------------------------------------------------------------------------ stream


def test_stream_options_without_stream_is_a_400(server):
    routes = (("/v1/completions", {"prompt": "Hi"}), ("/v1/chat/completions", {"messages": CHAT}))
    for route, body in routes:
        request = {**body, "stream_options": {"include_usage": True}}
        error = error_body(httpx.post(server.url + route, json=request), 400)
        assert error["param"] == "stream_options" and "stream is true" in error["message"]


@pytest.mark.parametrize("value", ["yes", "true", 1])
def test_stream_must_be_a_json_boolean(server, value):
    body = {"prompt": "Hi", "max_tokens": 2, "stream": value}
    error = error_body(httpx.post(server.url + "/v1/completions", json=body), 400)
    assert error["message"].startswith("stream: ")


# ------------------------------------------------------------------------- bounded messages


def test_huge_out_of_vocab_logit_bias_gets_a_short_error(server):
    bias = {str(token): 1.0 for token in range(10_000, 210_000)}
    body = {"prompt": "Hi", "max_tokens": 2, "logit_bias": bias}
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    error = error_body(response, 400)
    assert "out-of-vocab" in error["message"] and "more)" in error["message"]
    assert len(response.content) < 1000


def test_a_logit_bias_larger_than_any_vocabulary_is_refused_by_its_size(server):
    bias = {str(token): "not a number" for token in range(MAX_LOGIT_BIAS_KEYS + 1)}
    body = {"prompt": "Hi", "max_tokens": 2, "logit_bias": bias}
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    error = error_body(response, 400)
    # Refused on the count alone: no entry was converted (each value would be an error).
    assert error["param"] == "logit_bias"
    assert f"{MAX_LOGIT_BIAS_KEYS + 1} entries" in error["message"]
    assert "number" not in error["message"]


def test_the_logit_bias_size_check_runs_before_any_other_rule() -> None:
    bias = {"\ud800" + str(token): None for token in range(MAX_LOGIT_BIAS_KEYS + 1)}
    body = {"messages": CHAT, "logit_bias": bias}
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate(body)
    assert [error["type"] for error in caught.value.errors()] == ["too_many_logit_bias_keys"]


def test_a_huge_field_name_is_cut_in_the_error(server):
    name = "k" * 100_000
    body = {"messages": CHAT, "chat_template_kwargs": {name: "\ud800"}}
    response = _post_escaped(server.url + "/v1/chat/completions", body)
    error = error_body(response, 400)
    assert error["param"].startswith(f"chat_template_kwargs.{name[:100]}")
    assert len(response.content) < 2 * MAX_ERROR_MESSAGE_CHARS + 1000


def test_every_error_message_is_cut_to_the_bound(server):
    body = {"prompt": "Hi", "logit_bias": {str(i): "not a number" for i in range(5000)}}
    response = httpx.post(server.url + "/v1/completions", json=body)
    message = error_body(response, 400)["message"]
    assert len(message) < MAX_ERROR_MESSAGE_CHARS + 100 and "more characters)" in message


# --------------------------------------------------------------------------------- body size


def test_body_over_the_limit_is_a_413_by_content_length(server_farm):
    server = server_farm.server(max_request_body_bytes=4096)
    body = {"model": MODEL_NAME, "prompt": "x" * 5000, "max_tokens": 1}
    error = error_body(httpx.post(server.url + "/v1/completions", json=body), 413)
    assert "4096" in error["message"] and "--max-request-body-bytes" in error["message"]
    small = {"model": MODEL_NAME, "prompt": "x" * 100, "max_tokens": 1}
    assert httpx.post(server.url + "/v1/completions", json=small).status_code == 200


JSON_HEADERS = {"content-type": "application/json"}


def _in_chunks(payload: bytes, size: int = 1000):
    """`payload` as a generator, which httpx sends with chunked transfer encoding."""
    for start in range(0, len(payload), size):
        yield payload[start : start + size]


def test_chunked_body_over_the_limit_is_a_413(server_farm):
    server = server_farm.server(max_request_body_bytes=4096)
    payload = json.dumps({"model": MODEL_NAME, "prompt": "x" * 5000}).encode()
    response = httpx.post(
        server.url + "/v1/completions", content=_in_chunks(payload), headers=JSON_HEADERS
    )
    assert "transfer-encoding" in response.request.headers
    error_body(response, 413)


def test_chunked_body_within_the_limit_is_served(server_farm):
    server = server_farm.server(max_request_body_bytes=4096)
    body = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2, "ignore_eos": True}
    payload = json.dumps(body).encode()
    response = httpx.post(
        server.url + "/v1/completions", content=_in_chunks(payload, 10), headers=JSON_HEADERS
    )
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 2


def test_the_default_limit_is_32_mib(server):
    assert server.ctx.config.max_request_body_bytes == 32 * 1024 * 1024
