"""Start a server from a `ServerConfig` whose engine artifact is resolved (the CLI resolves it,
compiling on first use, so the server never reaches the compiler): build the engine, serve
the app with uvicorn until SIGTERM/SIGINT, then stop the engine.

Why it exists: the engine's life cycle belongs around the HTTP server, not inside the app:
on SIGTERM uvicorn stops accepting connections and lets in-flight responses finish (for at
most `GRACEFUL_SHUTDOWN_SECONDS`, after which the remaining streams are cancelled, which
aborts their requests); only then is the engine thread stopped.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.async_engine import AsyncEngine
from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.server.config import ServerConfig

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger("vllm_tvm.server")

GRACEFUL_SHUTDOWN_SECONDS = 30
"""How long in-flight requests may run on after SIGTERM before they are aborted."""

SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def build_engine(args: EngineArgs) -> AsyncEngine:
    """Load the model from `args.artifact` and start the engine thread."""
    return AsyncEngine(LLMEngine.from_args(args))


def serve(config: ServerConfig, sock: socket.socket | None = None) -> None:
    """Serve the model compiled into `config.engine.artifact` until a shutdown signal
    (blocking). `sock` is an already bound socket to serve on instead of
    `config.host`/`config.port`."""
    import uvicorn

    from vllm_tvm.server.app import build_app
    from vllm_tvm.server.connections import uvicorn_options
    from vllm_tvm.server.serving import ServingContext

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    engine = build_engine(config.engine)
    try:
        app = build_app(ServingContext(engine, config))
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=config.host,
                port=config.port,
                log_level=config.uvicorn_log_level,
                access_log=not config.disable_uvicorn_access_log,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
                **uvicorn_options(config),
            )
        )
        logger.info(
            "serving %s (max_model_len %d) on http://%s:%d",
            config.model_name,
            engine.max_model_len,
            config.host,
            config.port,
        )
        with _exit_cleanly_on_signals(server):
            server.run(sockets=[sock] if sock is not None else None)
    finally:
        engine.shutdown()


@contextlib.contextmanager
def _exit_cleanly_on_signals(server: uvicorn.Server) -> Iterator[None]:
    """Around `server.run`: a SIGTERM/SIGINT asks the server to shut down gracefully, and
    the one uvicorn re-raises after that shutdown ends `serve` normally (exit status 0, the
    engine stopped) instead of killing the process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request_exit(_signum: int, _frame: FrameType | None) -> None:
        server.should_exit = True

    previous = {sig: signal.signal(sig, request_exit) for sig in SHUTDOWN_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
