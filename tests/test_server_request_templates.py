"""A request's own chat template, and the event loop while prompts are rendered and tokenized.

Specification: a request's `chat_template` (or `chat_template_kwargs.chat_template`) is
refused with vLLM's 400 unless the server runs with --trust-request-chat-template; with it,
the template renders under bounds, and a template that fails (1/0, unbounded recursion, a
range past the sandbox's cap, a loop past the time bound) is a 400 naming the problem.
Rendering and tokenizing run off the event loop: while one request's prompt is being
tokenized, /health still answers at once.
"""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import openai
import pytest
from server_helpers import MODEL_NAME

from vllm_tvm.runtime.tokenization import template_limits
from vllm_tvm.server.serving import UNTRUSTED_TEMPLATE

USER = [{"role": "user", "content": "Hello"}]
ECHO_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def trusting(server_farm):
    """A server that renders the templates requests bring."""
    return server_farm.server(trust_request_chat_template=True)


def _chat_error(server, **extra) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(
            model=MODEL_NAME, messages=USER, max_tokens=2, extra_body=extra
        )
    return caught.value


@pytest.mark.parametrize(
    "extra",
    [{"chat_template": ECHO_TEMPLATE}, {"chat_template_kwargs": {"chat_template": ECHO_TEMPLATE}}],
    ids=["chat_template", "chat_template_kwargs"],
)
def test_a_request_template_is_refused_by_default(server, extra):
    error = _chat_error(server, **extra)
    assert error.status_code == 400
    assert error.body["message"] == UNTRUSTED_TEMPLATE
    assert "--trust-request-chat-template is not set" in UNTRUSTED_TEMPLATE
    tokenize = httpx.post(server.url + "/tokenize", json={"messages": USER, **extra})
    assert tokenize.status_code == 400 and tokenize.json()["error"]["message"] == UNTRUSTED_TEMPLATE


def test_a_trusted_request_template_renders(trusting):
    body = {"messages": USER, "chat_template": ECHO_TEMPLATE}
    tokens = httpx.post(trusting.url + "/tokenize", json=body).json()["tokens"]
    text = httpx.post(trusting.url + "/detokenize", json={"tokens": tokens}).json()["prompt"]
    assert text == "Hello"


@pytest.mark.parametrize(
    ("template", "named"),
    [
        ("{{ 1/0 }}", "ZeroDivisionError"),
        ("{% for i in range(100001) %}{% endfor %}", "Range too big"),
        ("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{{ 'x' * 10000000000 }}", "repeats a sequence"),
    ],
)
def test_a_failing_request_template_is_a_400_naming_the_problem(trusting, template, named):
    error = _chat_error(trusting, chat_template=template)
    assert error.status_code == 400
    assert "chat template failed" in error.body["message"] and named in error.body["message"]


def test_a_runaway_template_is_stopped_while_health_still_answers(trusting, monkeypatch):
    monkeypatch.setattr(template_limits, "MAX_RENDER_SECONDS", 2.0)
    loops = "{% for i in range(100000) %}" * 3 + "{% endfor %}" * 3
    outcome: dict[str, object] = {}

    def send() -> None:
        started = time.monotonic()
        outcome["error"] = _chat_error(trusting, chat_template=loops)
        outcome["seconds"] = time.monotonic() - started

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(0.5)
    health = _timed_health(trusting)
    sender.join(timeout=30)
    assert health < 0.5
    assert "rendered for more than 2 s" in outcome["error"].body["message"]  # type: ignore[attr-defined]
    assert outcome["seconds"] < 10  # type: ignore[operator]


def _timed_health(server) -> float:
    started = time.monotonic()
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    return time.monotonic() - started


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_tokenizing_a_prompt_leaves_the_event_loop_free(server, monkeypatch, route):
    ctx = server.ctx
    tokenize = ctx.encode

    def slow_encode(text: str, add_special_tokens: bool) -> list[int]:
        time.sleep(2)
        return tokenize(text, add_special_tokens)

    monkeypatch.setattr(ctx, "encode", slow_encode)
    client = server.client()
    results: list[object] = []

    def send() -> None:
        if route == "completions":
            results.append(client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=1))
        else:
            results.append(
                client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=1)
            )

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(0.3)
    health = _timed_health(server)
    sender.join(timeout=30)
    assert health < 0.5
    assert len(results) == 1
