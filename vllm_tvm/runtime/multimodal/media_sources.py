"""The encoded bytes of an image a request names by an `http(s)` or `file://` URL.

Why here, apart from the data: URL parsing: both reach outside the process on a client's
word, so both are bounded before a byte is trusted. A fetch has one deadline for the whole
transfer (a server that drips a byte at a time is cut off at it, not at each read's
timeout; one stalled read may overrun it by up to that timeout), at most
`max_encoded_bytes` read (a declared Content-Length past it is refused before the body),
a bounded number of redirects, to http(s) only, and a non-2xx answer is an error. With
`allowed_media_domains` (vLLM's `--allowed-media-domains`; unset: any host) a URL whose
host is not one of them is refused before anything is sent, and so is a redirect to one
(else a listed host could send the fetch anywhere).
A local file is served only from under `allowed_local_media_path` (vLLM's
`--allowed-local-media-path`; unset: none), its real path checked after symlinks and `..`
are resolved, so a link or a traversal out of that directory is refused.

Every failure is an `ImageInputError` naming the part. The fetch blocks its thread: callers
run it off the event loop (the server builds a chat call in a worker thread)."""

from __future__ import annotations

import http.client
import math
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from vllm_tvm.runtime.multimodal.image_errors import ImageInputError

DEFAULT_IMAGE_FETCH_TIMEOUT = 5.0
"""Seconds one image fetch may take in all (vLLM's VLLM_IMAGE_FETCH_TIMEOUT default)."""

IMAGE_FETCH_TIMEOUT_ENV = "VLLM_IMAGE_FETCH_TIMEOUT"
"""The environment variable that sets the fetch deadline (the server and `LLM` alike)."""

MAX_REDIRECTS = 5
"""The most redirects one image fetch follows."""

READ_CHUNK = 64 * 1024


def parse_fetch_timeout(text: str) -> float:
    """A fetch deadline in seconds: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ValueError(f"must be a number of seconds above 0, got {text!r}")
    return value


def fetch_timeout_from_environment() -> float:
    """The fetch deadline `VLLM_IMAGE_FETCH_TIMEOUT` sets, else the default; ValueError
    naming the variable when it holds no such number."""
    text = os.environ.get(IMAGE_FETCH_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_IMAGE_FETCH_TIMEOUT
    try:
        return parse_fetch_timeout(text)
    except ValueError as error:
        raise ValueError(f"{IMAGE_FETCH_TIMEOUT_ENV} {error}") from None


@dataclass(frozen=True)
class MediaSources:
    """Where images may come from besides data: URLs: `fetch_timeout` seconds for a whole
    http(s) fetch, `allowed_local_media_path` the directory file:// URLs may read under
    (None: no local files), `allowed_media_domains` the hosts http(s) URLs may name (None:
    any; compared without case, exactly: a subdomain is another host)."""

    fetch_timeout: float = DEFAULT_IMAGE_FETCH_TIMEOUT
    allowed_local_media_path: Path | None = None
    max_redirects: int = MAX_REDIRECTS
    allowed_media_domains: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.allowed_media_domains is not None:
            domains = frozenset(domain.lower() for domain in self.allowed_media_domains)
            object.__setattr__(self, "allowed_media_domains", domains)

    def check_domain(self, url: str, part_index: int) -> None:
        """Refuse `url` (ImageInputError naming its host) unless its host may be fetched."""
        allowed = self.allowed_media_domains
        if allowed is None:
            return
        host = (urlsplit(url).hostname or "").lower()
        if host not in allowed:
            raise ImageInputError(
                part_index,
                f"the image URL's host {host!r} is not in --allowed-media-domains "
                f"({', '.join(sorted(allowed))})",
            )


def fetch_http_image(url: str, part_index: int, max_bytes: int, sources: MediaSources) -> bytes:
    """The body of `url`, or an ImageInputError saying why it could not be fetched."""
    sources.check_domain(url, part_index)
    deadline = time.monotonic() + sources.fetch_timeout
    opener = urllib.request.build_opener(_redirects_within(sources, part_index))
    request = urllib.request.Request(url, headers={"Accept": "image/*"})
    try:
        with opener.open(request, timeout=sources.fetch_timeout) as response:
            return _read_bounded(response, part_index, max_bytes, deadline, sources)
    except ImageInputError:
        raise
    except urllib.error.HTTPError as error:
        raise ImageInputError(
            part_index, f"fetching {url} answered HTTP {error.code} {error.reason}"
        ) from None
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError | socket.timeout):
            raise _timed_out(url, part_index, sources) from None
        raise ImageInputError(part_index, f"fetching {url} failed: {error.reason}") from None
    except TimeoutError:
        raise _timed_out(url, part_index, sources) from None
    except (OSError, ValueError, http.client.HTTPException) as error:
        raise ImageInputError(
            part_index, f"fetching {url} failed ({type(error).__name__}: {error})"
        ) from None


def read_local_image(url: str, part_index: int, max_bytes: int, sources: MediaSources) -> bytes:
    """The bytes of the file a `file://` URL names, if it lies under the allowed directory."""
    allowed = sources.allowed_local_media_path
    if allowed is None:
        raise ImageInputError(
            part_index,
            "local image files are not served without --allowed-local-media-path; "
            "send the image inline as a data: URL",
        )
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise ImageInputError(part_index, f"file URL host {parts.netloc!r} is not local")
    requested = Path(url2pathname(unquote(parts.path)))
    root = allowed.resolve()
    try:
        path = requested.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ImageInputError(part_index, f"no such image file: {requested}") from None
    if not path.is_relative_to(root):
        raise ImageInputError(
            part_index,
            f"the file {requested} is not under --allowed-local-media-path {allowed}",
        )
    if not path.is_file():
        raise ImageInputError(part_index, f"{requested} is not a file")
    size = path.stat().st_size
    if size > max_bytes:
        raise ImageInputError(
            part_index, f"the image is {size} bytes; at most {max_bytes} are accepted"
        )
    return path.read_bytes()


def _read_bounded(
    response: http.client.HTTPResponse,
    part_index: int,
    max_bytes: int,
    deadline: float,
    sources: MediaSources,
) -> bytes:
    """The body, read a chunk at a time against the byte cap and the whole-fetch deadline."""
    url = response.geturl()
    if not 200 <= response.status < 300:
        raise ImageInputError(part_index, f"fetching {url} answered HTTP {response.status}")
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ImageInputError(
            part_index, f"the image is {declared} bytes; at most {max_bytes} are accepted"
        )
    body = bytearray()
    while chunk := response.read1(READ_CHUNK):
        body += chunk
        if len(body) > max_bytes:
            raise ImageInputError(
                part_index, f"the image is over {max_bytes} bytes; at most that is accepted"
            )
        if time.monotonic() > deadline:
            raise _timed_out(url, part_index, sources)
    return bytes(body)


def _timed_out(url: str, part_index: int, sources: MediaSources) -> ImageInputError:
    return ImageInputError(
        part_index,
        f"fetching {url} took longer than {sources.fetch_timeout:g} s ({IMAGE_FETCH_TIMEOUT_ENV})",
    )


def _redirects_within(sources: MediaSources, part_index: int) -> urllib.request.HTTPRedirectHandler:
    """A redirect handler that follows at most `sources.max_redirects` redirects, only to
    http(s) and to hosts `sources` allows."""

    class BoundedRedirects(urllib.request.HTTPRedirectHandler):
        max_redirections = sources.max_redirects

        def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
            if urlsplit(newurl).scheme.lower() not in ("http", "https"):
                raise urllib.error.URLError(f"redirect to a non-http(s) URL {newurl!r}")
            sources.check_domain(newurl, part_index)
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    return BoundedRedirects()
