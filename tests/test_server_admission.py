"""What one client may ask of a live server, through plain HTTP.

Specification: an integer sampling value that does not fit int64 (top_k, seed, token ids)
is a 400 naming the field before anything is scheduled, and the engine keeps serving; a
call whose prompts x n exceed `--max-sequences-per-request` is a 400 naming the numbers;
while `--max-waiting-requests` requests wait for their first token a new call is a 429,
and once the server is shutting down every new call is a 503, both OpenAI-shaped errors.
"""

from __future__ import annotations

import asyncio

import httpx2 as httpx
import pytest
from server_helpers import MODEL_NAME, error_body

from vllm_tvm.runtime.engine.admission import Admission, AdmissionLimits

PROMPT = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2}
CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}


@pytest.mark.parametrize(
    ("path", "extra", "name"),
    [
        ("/v1/completions", {"top_k": 2**63}, "top_k"),
        ("/v1/chat/completions", {"top_k": 2**64 + 5}, "top_k"),
        ("/v1/completions", {"seed": 2**63}, "seed"),
        ("/v1/chat/completions", {"seed": -(2**63) - 1}, "seed"),
        ("/v1/completions", {"stop_token_ids": [2**63]}, "stop_token_ids"),
        ("/v1/chat/completions", {"logit_bias": {str(2**64): 1.0}}, "logit_bias keys"),
    ],
)
def test_an_integer_beyond_int64_is_a_400_and_the_engine_serves_on(server, path, extra, name):
    body = {**(PROMPT if path == "/v1/completions" else CHAT), "temperature": 0.7, **extra}
    error = error_body(httpx.post(server.url + path, json=body), 400)
    assert error["message"].startswith(f"{name} must be within the signed 64-bit range")
    assert httpx.post(server.url + "/v1/completions", json=PROMPT).status_code == 200


def test_the_largest_int64_top_k_samples_every_token(server):
    body = {**PROMPT, "temperature": 0.7, "top_k": 2**63 - 1, "seed": 2**63 - 1}
    reply = httpx.post(server.url + "/v1/completions", json=body)
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["choices"][0]["finish_reason"] == "length"


def test_prompts_times_n_over_the_cap_is_a_400_naming_the_numbers(server):
    body = {**PROMPT, "prompt": ["a", "b", "c"], "n": 100, "temperature": 1.0}
    error = error_body(httpx.post(server.url + "/v1/completions", json=body), 400)
    assert error["param"] == "n"
    assert error["message"].startswith(
        "the request asks for 300 sequences (3 prompts x n=100), more than the 256"
    )


def test_prompts_times_n_at_the_cap_is_served(server):
    body = {**PROMPT, "prompt": ["a", "b"], "n": 128, "temperature": 1.0, "max_tokens": 1}
    reply = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text[:300]
    assert len(reply.json()["choices"]) == 256


def test_a_full_waiting_queue_is_a_429_until_it_drains(server, server_farm, monkeypatch):
    limits = AdmissionLimits(max_waiting_requests=2)
    monkeypatch.setattr(server_farm.engine, "admission", Admission(limits))

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            body = {**PROMPT, "max_tokens": 4}
            return await asyncio.gather(
                *(client.post("/v1/completions", json=body) for _ in range(6))
            )

    replies = asyncio.run(burst())
    statuses = sorted(reply.status_code for reply in replies)
    assert statuses.count(200) >= 2 and set(statuses) == {200, 429}, statuses
    refused = next(reply for reply in replies if reply.status_code == 429)
    error = error_body(refused, 429)
    assert error["type"] == "RateLimitError"
    assert "(at most 2, --max-waiting-requests)" in error["message"]
    assert server_farm.engine.admission.num_waiting == 0
    assert httpx.post(server.url + "/v1/completions", json=PROMPT).status_code == 200


def test_a_stopping_engine_answers_503(server, server_farm, monkeypatch):
    stopping = Admission(AdmissionLimits())
    stopping.stop()
    monkeypatch.setattr(server_farm.engine, "admission", stopping)
    for path, body in (("/v1/completions", PROMPT), ("/v1/chat/completions", CHAT)):
        error = error_body(httpx.post(server.url + path, json=body), 503)
        assert error["type"] == "ServiceUnavailableError"
        assert "shutting down" in error["message"]
