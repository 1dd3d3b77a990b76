"""A real `vllm-tvm serve` process on loopback receiving SIGTERM with requests in flight.

Specification: SIGTERM stops admitting and aborts every running request: each stream ends
with a final chunk whose finish_reason is "abort" followed by `data: [DONE]`, a
non-streaming call gets its response (finish_reason "abort"), and the process exits with
status 0 within a few seconds, logging no traceback.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx2 as httpx
from server_helpers import wait_until

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.entrypoints.resolve import resolve_artifact

EXIT_SECONDS = 10
"""How long the process may take from SIGTERM to its exit (it takes about 1-2 s)."""

LONG = {"prompt": "Hello", "max_tokens": 1500, "ignore_eos": True}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sigterm_aborts_the_requests_in_flight_and_exits(server_farm):
    artifact = resolve_artifact(CompileOptions(server_farm.model_dir), show_progress=False)
    port = _free_port()
    command = [
        sys.executable, "-m", "vllm_tvm.cli.main", "serve", str(server_farm.model_dir),
        "--artifact", str(artifact), "--host", "127.0.0.1", "--port", str(port),
        "--num-blocks", "160", "--disable-log-requests",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ)
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return httpx.get(url + "/health").status_code == 200
            except httpx.TransportError:
                return process.poll() is not None

        assert wait_until(healthy, timeout=120) and process.poll() is None
        streams: list[list[str]] = [[], []]
        replies: list[httpx.Response] = []

        def stream(events: list[str]) -> None:
            body = {**LONG, "stream": True}
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as reply:
                events.extend(line for line in reply.iter_lines() if line)

        def whole() -> None:
            replies.append(httpx.post(url + "/v1/completions", json=LONG, timeout=60))

        readers = [threading.Thread(target=stream, args=(events,)) for events in streams]
        readers.append(threading.Thread(target=whole))
        for reader in readers:
            reader.start()
        assert wait_until(lambda: all(len(events) > 1 for events in streams))
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        exit_seconds = time.monotonic() - signalled
        for reader in readers:
            reader.join(timeout=10)
        log = process.stdout.read().decode() if process.stdout else ""
        assert exit_seconds < EXIT_SECONDS, log[-3000:]
        for events in streams:
            assert events[-1] == "data: [DONE]"
            last = json.loads(events[-2].removeprefix("data: "))
            assert last["choices"][0]["finish_reason"] == "abort"
            assert all('"finish_reason": "length"' not in event for event in events)
        [reply] = replies
        assert reply.status_code == 200, reply.text[:300]
        assert reply.json()["choices"][0]["finish_reason"] == "abort"
        assert "Traceback" not in log, log[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
