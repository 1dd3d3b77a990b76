"""SSE keep-alive on a live server: comment frames while a stream waits for the engine.

Specification (the reference server's): while a chat or completion stream has nothing to
send (a long prefill before the first token), the server sends `:\\n\\n` every
VT_SERVER_SSE_PING_S seconds (15 by default, 0: none); comments are not events, so a real
SSE client (the openai SDK) reads the same stream as without them.

A long prefill is played by an engine whose every request waits WAIT seconds before its
first output (the rest is the farm's engine, unchanged).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from server_helpers import MODEL_NAME, LiveServer

from vllm_tvm.cli.main import build_parser
from vllm_tvm.cli.serve_cmd import config_from_args
from vllm_tvm.server.serving import ServingContext
from vllm_tvm.server.sse import with_pings

WAIT = 0.6
PING_SECONDS = 0.1


class SlowPrefillEngine:
    """The farm's engine, with every request's first output held back WAIT seconds."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def generate(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        await asyncio.sleep(WAIT)
        async for output in self._engine.generate(*args, **kwargs):
            yield output


@pytest.fixture(scope="module")
def servers(server_farm):
    started = {}
    for ping in (PING_SECONDS, 0.0):
        config = replace(server_farm.base_config(), sse_ping_seconds=ping)
        engine = SlowPrefillEngine(server_farm.engine)
        ctx = ServingContext(engine, config, constraints=server_farm.constraints)  # type: ignore[arg-type]
        started[ping] = LiveServer(ctx)
    yield started
    for server in started.values():
        server.stop()


ROUTES = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
    "completions": ("/v1/completions", {"prompt": "Hi"}),
}


def _raw_stream(server: LiveServer, route: str) -> str:
    path, body = ROUTES[route]
    body = {**body, "model": MODEL_NAME, "max_tokens": 3, "stream": True}
    with httpx.stream("POST", server.url + path, json=body, timeout=30) as response:
        assert response.status_code == 200
        return "".join(response.iter_text())


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_waiting_stream_sends_comment_frames_before_its_first_event(servers, route) -> None:
    text = _raw_stream(servers[PING_SECONDS], route)
    before_first_event = text[: text.index("data: ")]
    pings = before_first_event.count(":\n\n")
    assert before_first_event == ":\n\n" * pings
    assert pings >= 2  # WAIT / PING_SECONDS = 6 intervals; a loaded machine may send fewer
    assert text.endswith("data: [DONE]\n\n")


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_zero_interval_sends_no_comment_frame(servers, route) -> None:
    text = _raw_stream(servers[0.0], route)
    assert text.startswith("data: ")
    assert not any(line.startswith(":") for line in text.splitlines())


def test_the_openai_client_reads_a_pinged_stream_as_a_plain_one(servers) -> None:
    def streamed(server: LiveServer) -> str:
        chunks = server.client().chat.completions.create(
            model=MODEL_NAME,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=4,
            temperature=0.0,
            stream=True,
        )
        return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)

    assert streamed(servers[PING_SECONDS]) == streamed(servers[0.0])


def test_the_interval_comes_from_vt_server_sse_ping_s(monkeypatch) -> None:
    parser = build_parser()
    monkeypatch.delenv("VT_SERVER_SSE_PING_S", raising=False)
    assert config_from_args(parser.parse_args(["serve", "/m"])).sse_ping_seconds == 15.0
    monkeypatch.setenv("VT_SERVER_SSE_PING_S", "0")
    assert config_from_args(parser.parse_args(["serve", "/m"])).sse_ping_seconds == 0.0
    monkeypatch.setenv("VT_SERVER_SSE_PING_S", "-1")
    with pytest.raises(ValueError, match="VT_SERVER_SSE_PING_S must be a number of seconds"):
        config_from_args(parser.parse_args(["serve", "/m"]))


def test_closing_a_pinged_stream_mid_wait_closes_its_producer() -> None:
    """The disconnect path: the stream is closed while the producer waits for the engine;
    the producer's own clean-up (which aborts its requests) has run when close returns."""
    cleaned: list[str] = []

    async def producer() -> AsyncIterator[str]:
        try:
            await asyncio.sleep(30)
            yield "data: never\n\n"
        finally:
            cleaned.append("aborted")

    async def scenario() -> None:
        events = producer()
        framed = with_pings(events, 0.01)

        async def consume() -> None:
            async for _event in framed:
                pass

        async with anyio.create_task_group() as group:  # how the response runs a stream
            group.start_soon(consume)
            await asyncio.sleep(0.1)
            group.cancel_scope.cancel()  # the client left
        assert cleaned == ["aborted"]
        await framed.aclose()
        await events.aclose()  # what the response does next: no "already running" error

    asyncio.run(scenario())
