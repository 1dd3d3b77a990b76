"""Bounds on reading a request body: its size (`--max-request-body-bytes`) and the time it
may take to arrive (`--request-read-timeout`). A body over the size is answered with an
OpenAI-shaped 413 before any of it is parsed; one that does not arrive in time, with a 408.

Why it exists: the app reads and JSON-decodes a whole body before a handler runs, so without
a limit one client sending tens of megabytes holds the event loop (and every other client)
while it is decoded. The limit is checked on the declared Content-Length at once, and on the
bytes actually received for a body sent without one (chunked), so reading stops at the limit.
A client that declares a body and then sends it slowly, or not at all, would otherwise hold
its connection open for ever; the time bound closes it.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from vllm_tvm.server.errors import error_response


class BodySizeLimitMiddleware:
    """Answers 413 to an HTTP request whose body is longer than `max_bytes` (0: no limit),
    and 408 to one whose body does not arrive within `read_timeout` seconds (0: no limit).

    A body within the bounds is read whole here and handed on unchanged; after it, `receive`
    is the client's own again, so streams still see the client disconnect.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout: float = 0.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout = read_timeout

    def too_large(self, size: int | str) -> str:
        """The message of a refusal."""
        return (
            f"request body of {size} bytes exceeds the server's limit of {self.max_bytes} "
            "bytes (--max-request-body-bytes)"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.max_bytes <= 0 and self.read_timeout <= 0):
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if (
            self.max_bytes > 0
            and declared is not None
            and declared.isdigit()
            and int(declared) > self.max_bytes
        ):
            await self._refuse(
                self.too_large(declared), HTTPStatus.REQUEST_ENTITY_TOO_LARGE, scope, receive, send
            )
            return
        try:
            async with asyncio.timeout(self.read_timeout if self.read_timeout > 0 else None):
                first = await self._read_body(receive)
        except TimeoutError:
            late = (
                f"the request body did not arrive within {self.read_timeout:g} s "
                "(--request-read-timeout)"
            )
            await self._refuse(late, HTTPStatus.REQUEST_TIMEOUT, scope, receive, send)
            return
        if first is None:
            refusal = self.too_large(f"more than {self.max_bytes}")
            await self._refuse(refusal, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, scope, receive, send)
            return
        await self.app(scope, _replay(first, receive), send)

    async def _read_body(self, receive: Receive) -> Message | None:
        """The whole body as one message (or the disconnect that cut it short); None when
        it passes `max_bytes`."""
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body ended
                return message
            chunk = message.get("body", b"")
            received += len(chunk)
            if 0 < self.max_bytes < received:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

    @staticmethod
    async def _refuse(
        message: str, status: HTTPStatus, scope: Scope, receive: Receive, send: Send
    ) -> None:
        response = error_response(message, status)
        response.headers["connection"] = "close"
        await response(scope, receive, send)


def _replay(first: Message, receive: Receive) -> Receive:
    """A `receive` that gives `first`, then defers to the client's `receive`."""
    pending = [first]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed
