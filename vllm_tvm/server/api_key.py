"""The API-key check (--api-key, $VLLM_API_KEY): 401 to any request without
`Authorization: Bearer <key>`, but on the liveness routes and CORS preflights.

Why a plain ASGI middleware: streams keep their disconnect signal, which Starlette's
`BaseHTTPMiddleware` would swallow.
"""

from __future__ import annotations

import secrets
from http import HTTPStatus

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from vllm_tvm.server.errors import error_response
from vllm_tvm.server.routes.probes import OPEN_PATHS


class APIKeyMiddleware:
    """Answers 401 to a request without the key (see the module docstring)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.api_key = api_key

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header carries the key."""
        scheme, _, token = (header or "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(
            token.strip().encode(), self.api_key.encode()
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] in OPEN_PATHS
            or scope["method"] == "OPTIONS"
            or self.authorized(Headers(scope=scope).get("authorization"))
        ):
            await self.app(scope, receive, send)
            return
        response = error_response(
            "invalid or missing API key: send 'Authorization: Bearer <key>'",
            HTTPStatus.UNAUTHORIZED,
        )
        await response(scope, receive, send)
