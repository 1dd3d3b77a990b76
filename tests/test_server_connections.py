"""Connections that stall are closed: the request header and the request body each have
`--request-read-timeout` seconds to arrive.

Specification: a connection that opens and sends nothing, or sends part of a header and then
nothing, is closed once the timeout passes; one whose header arrived but whose body stops
short is answered 408 and closed; a connection whose requests arrive in time is served
as usual, several requests over it (keep-alive).
"""

from __future__ import annotations

import socket
import time

import pytest

TIMEOUT = 1.0


@pytest.fixture(scope="module")
def strict(server_farm):
    """A server whose clients have TIMEOUT seconds to send a header, then a body."""
    return server_farm.server(request_read_timeout=TIMEOUT)


def _connect(server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.settimeout(TIMEOUT * 6)
    return sock


def _read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took
    (a recv timeout, the server never closing, fails the test)."""
    started = time.monotonic()
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received, time.monotonic() - started


@pytest.mark.parametrize(
    "sent", [b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"], ids=["silent", "half header"]
)
def test_a_connection_without_a_whole_header_is_closed(strict, sent):
    with _connect(strict) as sock:
        sock.sendall(sent)
        received, seconds = _read_until_closed(sock)
    assert received == b""
    assert TIMEOUT * 0.8 < seconds < TIMEOUT * 4


def test_a_body_that_stops_short_is_a_408_and_the_connection_closed(strict):
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    with _connect(strict) as sock:
        sock.sendall(head + b'{"prompt":')
        received, seconds = _read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 408 ")
    assert b"--request-read-timeout" in received
    assert seconds < TIMEOUT * 4


def test_requests_in_time_are_served_over_one_connection(strict):
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(strict) as sock:
        for _ in range(2):
            sock.sendall(request[:10])
            time.sleep(TIMEOUT * 0.6)
            sock.sendall(request[10:])
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            time.sleep(TIMEOUT * 0.6)
