"""POST /v1/completions and /v1/chat/completions: the body's shape is checked by FastAPI
against `protocol`, the route's rules live in completions.py and chat.py."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from vllm_tvm.server.chat import create_chat_completion
from vllm_tvm.server.completions import create_completion
from vllm_tvm.server.protocol import ChatCompletionRequest, CompletionRequest
from vllm_tvm.server.serving import ServingContext


def generation_routes(ctx: ServingContext) -> APIRouter:
    """The two generation routes over `ctx`."""
    router = APIRouter()

    @router.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await create_completion(ctx, body, request)

    @router.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await create_chat_completion(ctx, body, request)

    return router
