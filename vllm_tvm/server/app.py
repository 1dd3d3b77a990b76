"""The FastAPI application: the routes (routes/), the request-body limit, the API-key check
and the error shapes, over one `ServingContext`.

Why it exists: routes are thin — they check the body's shape (FastAPI, against the models
of `protocol`), hand it to the module that owns the route's rules and return the result.
Building the app from a context (not from a model path) lets tests run several apps over
one engine and lets the launcher own the engine's life cycle.
"""

from __future__ import annotations

from fastapi import FastAPI

from vllm_tvm import __version__
from vllm_tvm.server.api_key import APIKeyMiddleware
from vllm_tvm.server.body_limit import BodySizeLimitMiddleware
from vllm_tvm.server.errors import install_error_handlers
from vllm_tvm.server.routes.admin import admin_routes
from vllm_tvm.server.routes.generation import generation_routes
from vllm_tvm.server.routes.models import model_routes
from vllm_tvm.server.routes.probes import probe_routes
from vllm_tvm.server.routes.tokenization import tokenization_routes
from vllm_tvm.server.serving import ServingContext

ROUTE_GROUPS = (generation_routes, model_routes, probe_routes, tokenization_routes, admin_routes)


def build_app(ctx: ServingContext) -> FastAPI:
    """The server's app over `ctx` (the engine's life cycle stays with the caller)."""
    app = FastAPI(title="vllm-tvm OpenAI-compatible server", version=__version__)
    app.state.ctx = ctx
    install_error_handlers(app)
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=ctx.config.max_request_body_bytes,
        read_timeout=ctx.config.request_read_timeout,
    )
    if ctx.config.api_key is not None:
        app.add_middleware(APIKeyMiddleware, api_key=ctx.config.api_key)
    for routes in ROUTE_GROUPS:
        app.include_router(routes(ctx))
    return app
