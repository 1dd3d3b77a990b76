"""How the HTTP server treats connections: how long an idle one is kept, how large a request
header may be, and how long a client may take to send one (`--request-read-timeout`).

Why it exists: uvicorn closes an idle keep-alive connection, but not one that opened and
sent nothing, nor one that sent part of a request header and then went silent: each holds a
socket (and a slot toward the process's file limit) for as long as the client likes. The
protocol here starts a clock when the server waits for a request header and closes the
connection when the header is not complete in time; the body's own clock is the body
reader's (`body_limit`). Both the launcher and in-process servers take these options.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from vllm_tvm.server.config import ServerConfig

KEEP_ALIVE_SECONDS = 5
"""How long an idle keep-alive connection is kept open (uvicorn's and vLLM's default)."""

MAX_HEADER_BYTES = 16 * 1024
"""The largest request header (request line and fields) the server reads; a longer one is
answered 400 and the connection closed."""


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol that closes a connection whose request header does not
    arrive whole within `header_timeout` seconds of the server starting to wait for it."""

    header_timeout: float = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._watch_header()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_header()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def _awaiting_header(self) -> bool:
        return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

    def _watch_header(self) -> None:
        """Start the clock when a header is awaited and none runs; stop it once it came."""
        if not self._awaiting_header():
            self._stop_header_timer()
        elif self._header_timer is None and self.header_timeout > 0:
            self._header_timer = self.loop.call_later(self.header_timeout, self._header_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_late(self) -> None:
        self._header_timer = None
        if self._awaiting_header():
            self.logger.debug("closing a connection whose request header did not arrive in time")
            self.transport.close()


def uvicorn_options(config: ServerConfig) -> dict[str, Any]:
    """The `uvicorn.Config` keywords for connections of a server with these settings."""
    protocol = type(
        "HeaderTimeoutProtocol",
        (HeaderTimeoutProtocol,),
        {"header_timeout": config.request_read_timeout},
    )
    return {
        "http": protocol,
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }
