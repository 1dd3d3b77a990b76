"""The request body size limit (`--max-request-body-bytes`): a body over it is answered with
an OpenAI-shaped 413 before any of it is parsed.

Why it exists: the app reads and JSON-decodes a whole body before a handler runs, so without
a limit one client sending tens of megabytes holds the event loop (and every other client)
while it is decoded. The limit is checked on the declared Content-Length at once, and on the
bytes actually received for a body sent without one (chunked), so reading stops at the limit.
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from vllm_tvm.server.errors import error_response


class BodySizeLimitMiddleware:
    """Answers 413 to an HTTP request whose body is longer than `max_bytes` (0: no limit).

    A body within the limit is read whole here and handed on unchanged; after it, `receive`
    is the client's own again, so streams still see the client disconnect.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def too_large(self, size: int | str) -> str:
        """The message of a refusal."""
        return (
            f"request body of {size} bytes exceeds the server's limit of {self.max_bytes} "
            "bytes (--max-request-body-bytes)"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.max_bytes <= 0:
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(self.too_large(declared), scope, receive, send)
            return
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body ended
                await self.app(scope, _replay(message, receive), send)
                return
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                refusal = self.too_large(f"more than {self.max_bytes}")
                await self._refuse(refusal, scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay(body, receive), send)

    @staticmethod
    async def _refuse(message: str, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(message, HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
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
