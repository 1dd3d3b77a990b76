"""Start a server from a `ServerConfig` whose engine artifact is resolved (the CLI resolves it,
compiling on first use, so the server never reaches the compiler): build the engine, serve
the app with uvicorn until SIGTERM/SIGINT, then stop the engine.

Why it exists: the engine's life cycle belongs around the HTTP server, not inside the app.
On SIGTERM (or SIGINT) the engine first stops admitting (a request still reaching a route
gets 503) and aborts every request in flight, so each stream ends with a finish_reason
"abort" chunk and `data: [DONE]` and each non-streaming call gets its response; uvicorn
then stops accepting connections and waits for those responses to be written (at most
`GRACEFUL_SHUTDOWN_SECONDS`, a backstop); only then is the engine thread stopped and the
process exits with status 0.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

from vllm_tvm.runtime.engine.async_engine import AsyncEngine
from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.server.config import ServerConfig

logger = logging.getLogger("vllm_tvm.server")

GRACEFUL_SHUTDOWN_SECONDS = 30
"""How long the aborted requests' last responses may take to be written after SIGTERM
before their connections are cut."""

SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def build_engine(config: ServerConfig) -> AsyncEngine:
    """Load the model from `config.engine.artifact` and start the engine thread, with the
    config's bounds on what it takes in."""
    return AsyncEngine(LLMEngine.from_args(config.engine), config.admission_limits)


def serve(config: ServerConfig, sock: socket.socket | None = None) -> None:
    """Serve the model compiled into `config.engine.artifact` until a shutdown signal
    (blocking). `sock` is an already bound socket to serve on instead of
    `config.host`/`config.port`."""
    from vllm_tvm.server.app import build_app
    from vllm_tvm.server.connections import uvicorn_options
    from vllm_tvm.server.serving import ServingContext

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    engine = build_engine(config)
    try:
        app = build_app(ServingContext(engine, config))
        server = DrainingServer(
            engine,
            uvicorn.Config(
                app,
                host=config.host,
                port=config.port,
                log_level=config.uvicorn_log_level,
                access_log=not config.disable_uvicorn_access_log,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
                **uvicorn_options(config),
            ),
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


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first shutdown signal also stops the engine admitting and
    aborts what it runs, so that the graceful shutdown has nothing left to wait for."""

    def __init__(self, engine: AsyncEngine, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.engine = engine

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            logger.info("shutting down: refusing new requests, aborting those in flight")
            self.engine.stop_admitting()
        super().handle_exit(sig, frame)


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
