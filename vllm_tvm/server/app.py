"""The FastAPI application: every route of the OpenAI-compatible server, the API-key check
and the error shapes, over one `ServingContext`.

Why it exists: routes are thin — they check the body's shape (FastAPI, against the models
of `protocol`), hand it to the module that owns the route's rules and return the result.
Building the app from a context (not from a model path) lets tests run several apps over
one engine and lets the launcher own the engine's life cycle.
"""

from __future__ import annotations

import os
import platform
import secrets
import sys
from collections.abc import Mapping
from dataclasses import asdict
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from vllm_tvm import __version__
from vllm_tvm.server.body_limit import BodySizeLimitMiddleware
from vllm_tvm.server.chat import create_chat_completion
from vllm_tvm.server.completions import create_completion
from vllm_tvm.server.errors import APIError, error_response, install_error_handlers
from vllm_tvm.server.metrics import metrics_registry, render
from vllm_tvm.server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)
from vllm_tvm.server.serving import ServingContext, off_loop

OPEN_PATHS = frozenset({"/health", "/ping"})
"""Routes that answer without the API key (liveness probes)."""

SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
"""An environment variable whose name holds one of these is shown masked in /server_info."""

MASKED = "<hidden>"


def shown_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The VLLM*/TVM*/VT_* variables /server_info shows, secrets masked."""
    return {
        name: MASKED if any(part in name.upper() for part in SECRET_NAME_PARTS) else value
        for name, value in environ.items()
        if name.startswith(("VLLM", "TVM", "VT_"))
    }


class APIKeyMiddleware:
    """Answers 401 to any request without `Authorization: Bearer <api key>`, except on the
    liveness routes. A plain ASGI middleware, so streams keep their disconnect signal."""

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


def build_app(ctx: ServingContext) -> FastAPI:
    """The server's app over `ctx` (the engine's life cycle stays with the caller)."""
    app = FastAPI(title="vllm-tvm OpenAI-compatible server", version=__version__)
    app.state.ctx = ctx
    install_error_handlers(app)
    registry = metrics_registry(ctx.engine.stats, ctx.model_name, ctx.engine.cache_config)

    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=ctx.config.max_request_body_bytes,
        read_timeout=ctx.config.request_read_timeout,
    )
    if ctx.config.api_key is not None:
        app.add_middleware(APIKeyMiddleware, api_key=ctx.config.api_key)

    def model_card(name: str) -> dict[str, Any]:
        """A served name's entry in /v1/models; `root` is the served name, never the path
        the model was loaded from."""
        return {
            "id": name,
            "object": "model",
            "created": ctx.created,
            "owned_by": "vllm-tvm",
            "root": ctx.model_name,
            "parent": None,
            "max_model_len": ctx.max_model_len,
        }

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await create_completion(ctx, body, request)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await create_chat_completion(ctx, body, request)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(name) for name in ctx.config.model_names]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        ctx.check_model(model_id)
        return model_card(model_id)

    @app.get("/health")
    @app.head("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/ping")
    async def ping() -> Response:
        return Response(status_code=200)

    @app.post("/ping")
    async def ping_post() -> Response:
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/metrics")
    async def metrics() -> Response:
        if not ctx.config.enable_metrics:
            raise APIError("metrics are disabled (--disable-metrics)", HTTPStatus.NOT_FOUND)
        return Response(render(registry), media_type=CONTENT_TYPE_LATEST)

    def tokenized(body: TokenizeCompletionRequest | TokenizeChatRequest) -> dict[str, Any]:
        """The answer of /tokenize (run off the event loop)."""
        if isinstance(body, TokenizeChatRequest):
            text = ctx.render_chat(
                body.messages,
                tools=body.tools,
                add_generation_prompt=body.add_generation_prompt,
                continue_final_message=body.continue_final_message,
                chat_template=body.chat_template,
                template_kwargs=ctx.template_kwargs(body.chat_template_kwargs),
            )
        else:
            text = body.prompt
        ids = ctx.encode(text, body.add_special_tokens)
        result: dict[str, Any] = {
            "count": len(ids),
            "max_model_len": ctx.max_model_len,
            "tokens": ids,
        }
        if body.return_token_strs:
            result["token_strs"] = [ctx.tokenizer.id_to_token(i) for i in ids]
        return result

    @app.post("/tokenize")
    async def tokenize(body: TokenizeCompletionRequest | TokenizeChatRequest) -> dict[str, Any]:
        ctx.check_model(body.model)
        return await off_loop(tokenized, body)

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, str]:
        ctx.check_model(body.model)
        bad = [t for t in body.tokens if not 0 <= t < ctx.tokenizer.vocab_size]
        if bad:
            raise APIError(
                f"token ids {bad[:8]} are outside the vocabulary [0, {ctx.tokenizer.vocab_size})",
                param="tokens",
            )
        text = await off_loop(ctx.tokenizer.decode, body.tokens, skip_special_tokens=False)
        return {"prompt": text}

    @app.get("/server_info")
    async def server_info() -> dict[str, Any]:
        engine = ctx.engine
        return {
            "vllm_config": {
                "server": ctx.config.public_dict(),
                "max_model_len": ctx.max_model_len,
                "vocab_size": ctx.vocab_size,
                "cache": asdict(engine.cache_config),
                "scheduler": asdict(engine.scheduler_config),
                "eos_token_ids": engine.eos_token_ids,
            },
            "vllm_env": shown_environment(os.environ),
            "system_env": {
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "vllm_tvm": __version__,
            },
        }

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> JSONResponse:
        return JSONResponse({"success": bool(await ctx.engine.reset_prefix_cache())})

    return app
