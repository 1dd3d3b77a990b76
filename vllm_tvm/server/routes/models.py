"""GET /v1/models and /v1/models/{id}: every served name, as OpenAI's model cards."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from vllm_tvm.server.serving import ServingContext


def model_card(ctx: ServingContext, name: str) -> dict[str, Any]:
    """A served name's entry in /v1/models; `root` is the served name, never the path the
    model was loaded from."""
    return {
        "id": name,
        "object": "model",
        "created": ctx.created,
        "owned_by": "vllm-tvm",
        "root": ctx.model_name,
        "parent": None,
        "max_model_len": ctx.max_model_len,
    }


def model_routes(ctx: ServingContext) -> APIRouter:
    """The model listing routes over `ctx`."""
    router = APIRouter()

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [model_card(ctx, name) for name in ctx.config.model_names],
        }

    @router.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        ctx.check_model(model_id)
        return model_card(ctx, model_id)

    return router
