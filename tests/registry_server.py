"""A loopback HTTP server that serves a registry directory and injects faults on request.

It answers both layouts a puller uses: a plain base URL (`/index.json`, `/blobs/<sha256>`)
and a Hugging Face-style endpoint (`/<org>/<name>/resolve/<revision>/<path>`, with the
headers `huggingface_hub` reads: X-Repo-Commit, ETag, Content-Length; HEAD and GET), so the
same faults reach our HTTP downloader and `huggingface_hub`'s. Faults, keyed by the path
inside the registry: drop the connection after N bytes (once), flip a byte, answer a
status code, send N bytes then stall, or pretend the file is absent. Every request is
logged with its Range header so a test can see a resume happen.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HF_ROUTE = re.compile(r"^/[^/]+/[^/]+/resolve/[^/]+/(?P<path>.+)$")
REPO_COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Faults:
    drop_after: dict[str, int] = field(default_factory=dict)
    """path -> bytes sent before the connection is closed (the first GET only)."""
    flip_byte: dict[str, int] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    stall_after: dict[str, tuple[int, float]] = field(default_factory=dict)
    """path -> (bytes sent, seconds of silence after them)."""
    absent: set[str] = field(default_factory=set)


class RegistryServer:
    """`with RegistryServer(root) as server:` -> `server.url`, `server.hf_endpoint`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.faults = Faults()
        self.requests: list[tuple[str, str, str | None]] = []
        """(method, path inside the registry, Range header)"""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> RegistryServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def gets_of(self, path: str) -> list[str | None]:
        """The Range headers of every GET of `path`."""
        return [r for method, p, r in self.requests if method == "GET" and p == path]


def _handler_for(server: RegistryServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, head: bool) -> None:
            raw = self.path.split("?", 1)[0]
            hf = HF_ROUTE.match(raw)
            path = hf.group("path") if hf else raw.lstrip("/")
            byte_range = self.headers.get("Range")
            server.requests.append(("HEAD" if head else "GET", path, byte_range))
            faults = server.faults
            file = server.root / path
            if path in faults.status:
                self._fail(faults.status[path])
                return
            if path in faults.absent or not file.is_file() or ".." in path:
                self._fail(404, entry_not_found=bool(hf))
                return
            body = bytearray(file.read_bytes())
            if path in faults.flip_byte:
                body[faults.flip_byte[path]] ^= 0xFF
            start = 0
            if byte_range and (m := re.fullmatch(r"bytes=(\d+)-", byte_range)):
                start = int(m.group(1))
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(len(body) - start))
            self.send_header("Accept-Ranges", "bytes")
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            if hf:
                self.send_header("X-Repo-Commit", REPO_COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(file.read_bytes()).hexdigest()}"')
            self.end_headers()
            if head:
                return
            payload = bytes(body[start:])
            if path in faults.drop_after:
                self.wfile.write(payload[: faults.drop_after.pop(path)])
                self.wfile.flush()
                self.close_connection = True
                return
            if path in faults.stall_after:
                sent, seconds = faults.stall_after[path]
                self.wfile.write(payload[:sent])
                self.wfile.flush()
                time.sleep(seconds)
                return
            self.wfile.write(payload)

        def _fail(self, code: int, entry_not_found: bool = False) -> None:
            self.send_response(code)
            if entry_not_found:
                self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler
