"""One file over HTTP(S): resumed with a Range request after a dropped connection, bounded by a
read timeout, counted on a progress bar.

Why not a plain `urlopen(...).read()`: artifacts and weights run to gigabytes, and a
connection that drops at 90 % must not start over; a server that stops sending must end in
an error that says so instead of a hang. What arrives is not trusted here: the caller checks
size and sha256 before the file goes anywhere.
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Protocol

from vllm_tvm.artifact_registry.index import RegistryError

DEFAULT_ATTEMPTS = 4
"""Tries per file; each one after the first resumes where the last stopped."""
CHUNK_BYTES = 1 << 16
USER_AGENT = "vllm-tvm-registry"


class ProgressBar(Protocol):
    """What a download reports to (tqdm's bars are one)."""

    def update(self, n: int) -> object: ...

    def reset(self, total: int | None = None) -> object: ...


class _Retryable(Exception):
    """A failure worth another (resumed) attempt."""


def fetch_bytes(url: str, timeout: float) -> bytes | None:
    """The body at `url`, or None on 404."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise RegistryError(f"HTTP {err.code} {err.reason} fetching {url}") from None
    except (urllib.error.URLError, OSError) as err:
        raise RegistryError(f"cannot fetch {url}: {_reason(err)}") from None


def download_file(
    url: str,
    destination: Path,
    size: int,
    progress: ProgressBar,
    timeout: float,
    attempts: int = DEFAULT_ATTEMPTS,
) -> None:
    """Fetch `url` into `destination` until it holds `size` bytes, resuming a partial file
    with `Range: bytes=N-`; a read gives up after `timeout` seconds without a byte. Errors
    name the URL and the last cause."""
    last_problem = "no attempt made"
    for attempt in range(attempts):
        if attempt:
            time.sleep(min(0.2 * attempt, 2.0))
        try:
            _attempt(url, destination, size, progress, timeout)
        except _Retryable as problem:
            last_problem = str(problem)
            continue
        return
    raise RegistryError(f"download of {url} failed after {attempts} attempts: {last_problem}")


def _attempt(url: str, destination: Path, size: int, progress: ProgressBar, timeout: float) -> None:
    have = destination.stat().st_size if destination.exists() else 0
    if have > size:
        destination.unlink()
        have = 0
    if have == size:
        return
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            resumed = have > 0 and response.status == 206
            if not resumed:
                have = 0
            progress.reset(total=size)
            progress.update(have)
            with destination.open("ab" if resumed else "wb") as out:
                while chunk := response.read1(CHUNK_BYTES):
                    have += len(chunk)
                    if have > size:
                        raise RegistryError(f"{url} sent more than the {size} bytes expected")
                    out.write(chunk)
                    progress.update(len(chunk))
    except urllib.error.HTTPError as err:
        if err.code >= 500 or err.code == 429:
            raise _Retryable(f"HTTP {err.code} {err.reason}") from None
        raise RegistryError(f"HTTP {err.code} {err.reason} fetching {url}") from None
    except TimeoutError:
        raise _Retryable(f"timed out: no data for {timeout:g} s") from None
    except (http.client.HTTPException, urllib.error.URLError, OSError) as err:
        raise _Retryable(_reason(err)) from None
    if have < size:
        raise _Retryable(f"connection closed after {have} of {size} bytes")


def _reason(err: BaseException) -> str:
    reason = getattr(err, "reason", None)
    if isinstance(reason, TimeoutError):
        return "timed out"
    return str(reason or err) or type(err).__name__
