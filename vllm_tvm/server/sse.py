"""Server-sent events: the `data: {json}` framing, and a streaming response that stops its
producer the moment the client disconnects.

Why it exists: a stream's producer owns engine requests; when the client goes away they must
be aborted at once so their KV blocks are freed. Starlette only notices a disconnect when a
write fails (ASGI 2.4 servers), which may be long after the client left if the engine is
slow to produce the next token. This response watches the receive channel for the
disconnect while it streams, and always closes the producer, which aborts its requests.

While the producer has nothing to send (a long prefill before the first token), the
response sends an SSE comment frame (`:` and a blank line) every `ping_seconds`, as the
reference server does: proxies and clients with idle timeouts see a live connection, and
SSE clients skip comments, so no token or event changes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from vllm_tvm.server.errors import error_body
from vllm_tvm.server.generation import failure_status

DONE = "data: [DONE]\n\n"

PING = ":\n\n"
"""An SSE comment frame: keeps the connection visibly alive, carries no event."""


def sse(payload: dict[str, Any]) -> str:
    """One event carrying `payload` as JSON."""
    return f"data: {json.dumps(payload, ensure_ascii=False, allow_nan=False)}\n\n"


def sse_error(message: str, status: Any) -> str:
    """An event carrying an OpenAI error body (for failures after the stream started)."""
    return sse(error_body(message, status))


def sse_generation_failed(error: str) -> str:
    """The error event of a request that failed after its stream started, with the status
    `failure_status` gives its `error`."""
    return sse_error(f"generation failed: {error}", failure_status(error))


async def _next_event(events: AsyncGenerator[str, None]) -> str:
    return await anext(events)


async def with_pings(
    events: AsyncGenerator[str, None], ping_seconds: float
) -> AsyncGenerator[str, None]:
    """`events`, with PING sent after each `ping_seconds` in which none came (0: never)."""
    if ping_seconds <= 0:
        async for event in events:
            yield event
        return
    pending: asyncio.Task[str] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.create_task(_next_event(events))
            done, _ = await asyncio.wait({pending}, timeout=ping_seconds)
            if not done:
                yield PING
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield event
    finally:
        if pending is not None:  # the producer is mid-step: stop it, and wait until it has
            pending.cancel()  # (shielded: a cancelled stream must still let it finish)
            with anyio.CancelScope(shield=True):
                await asyncio.wait({pending})


class EventStreamResponse(StreamingResponse):
    """`text/event-stream` over an async generator, closed as soon as the client leaves,
    with a PING every `ping_seconds` the generator stays silent (0: none)."""

    def __init__(self, events: AsyncGenerator[str, None], ping_seconds: float = 0.0) -> None:
        self._events = events
        self._framed = with_pings(events, ping_seconds)
        super().__init__(self._framed, media_type="text/event-stream")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # the client is gone: nothing more can be sent
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._framed.aclose()
                await self._events.aclose()
