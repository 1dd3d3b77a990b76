"""GET /server_info (the settings, the engine's shape and the environment, secrets masked)
and POST /reset_prefix_cache."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from vllm_tvm import __version__
from vllm_tvm.server.serving import ServingContext

SHOWN_PREFIXES = ("VLLM", "TVM", "VT_")
"""The environment variables /server_info shows: those whose name starts with one of these."""

SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
"""An environment variable whose name holds one of these is shown masked in /server_info."""

MASKED = "<hidden>"


def shown_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The VLLM*/TVM*/VT_* variables /server_info shows, secrets masked."""
    return {
        name: MASKED if any(part in name.upper() for part in SECRET_NAME_PARTS) else value
        for name, value in environ.items()
        if name.startswith(SHOWN_PREFIXES)
    }


def admin_routes(ctx: ServingContext) -> APIRouter:
    """The server information and cache administration routes over `ctx`."""
    router = APIRouter()

    @router.get("/server_info")
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

    @router.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> JSONResponse:
        return JSONResponse({"success": bool(await ctx.engine.reset_prefix_cache())})

    return router
