"""What monitoring reads: /health and /ping (liveness, open without the API key), /version
and /metrics (Prometheus text, unless --disable-metrics)."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from vllm_tvm import __version__
from vllm_tvm.server.errors import APIError
from vllm_tvm.server.metrics import metrics_registry, render
from vllm_tvm.server.serving import ServingContext

OPEN_PATHS = frozenset({"/health", "/ping"})
"""Routes that answer without the API key (liveness probes)."""


def probe_routes(ctx: ServingContext) -> APIRouter:
    """The liveness, version and metrics routes over `ctx`."""
    router = APIRouter()
    registry = metrics_registry(ctx.engine.stats, ctx.model_name, ctx.engine.cache_config)

    @router.get("/health")
    @router.head("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @router.get("/ping")
    async def ping() -> Response:
        return Response(status_code=200)

    @router.post("/ping")
    async def ping_post() -> Response:
        return Response(status_code=200)

    @router.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @router.get("/metrics")
    async def metrics() -> Response:
        if not ctx.config.enable_metrics:
            raise APIError("metrics are disabled (--disable-metrics)", HTTPStatus.NOT_FOUND)
        return Response(render(registry), media_type=CONTENT_TYPE_LATEST)

    return router
