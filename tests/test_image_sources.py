"""Images named by `http(s)` and `file://` URLs, and `--limit-mm-per-prompt`: a fetch from a
loopback server decodes to the same pixels as the served bytes (through a redirect too), and
every hostile source (refused connection, a non-2xx answer, a body that is no image, a
declared or undeclared body past the byte cap, a server that stalls or drips bytes past the
deadline, a redirect loop) is an ImageInputError naming the part. Local files are read
only from under the allowed directory: no directory, a `..` traversal and a symlink out of
it are refused. `--allowed-media-domains` refuses any other host before a request is sent,
and a redirect to one. `LLM` reads VLLM_IMAGE_FETCH_TIMEOUT as the server does.
The per-prompt limit parses vLLM's JSON form and refuses bad values by name."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from image_files import rgb_file
from PIL import Image

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.multimodal.image_decoding import ImageLimits
from vllm_tvm.runtime.multimodal.image_errors import ImageInputError
from vllm_tvm.runtime.multimodal.image_url import load_image_url
from vllm_tvm.runtime.multimodal.media_limits import (
    check_item_count,
    parse_limit_mm_per_prompt,
)
from vllm_tvm.runtime.multimodal.media_sources import (
    DEFAULT_IMAGE_FETCH_TIMEOUT,
    IMAGE_FETCH_TIMEOUT_ENV,
    MediaSources,
    fetch_timeout_from_environment,
)

PART = 2
IMAGE = rgb_file(12, 10)
QUICK = MediaSources(fetch_timeout=0.5)


class Handler(BaseHTTPRequestHandler):
    """Serves IMAGE at /cat.png and a hostile answer at each other path; every path asked
    for is kept in `requested`."""

    requested: ClassVar[list[str]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path
        self.requested.append(path)
        if path == "/cat.png":
            self._answer(200, IMAGE)
        elif path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/cat.png")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/to-localhost":
            port = self.server.server_address[1]
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{port}/cat.png")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path in ("/to-file", "/to-ftp"):
            self.send_response(302)
            target = "file:///etc/passwd" if path == "/to-file" else "ftp://127.0.0.1/cat.png"
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/stall":
            time.sleep(1.5)  # no status line within the fetch's timeout
            self._answer(200, IMAGE)
        elif path == "/missing":
            self._answer(404, b"no")
        elif path == "/text":
            self._answer(200, b"hello, not an image")
        elif path == "/declared-huge":
            self.send_response(200)
            self.send_header("Content-Length", str(10**9))
            self.end_headers()
        elif path == "/undeclared-huge":
            self.send_response(200)
            self.end_headers()  # no Content-Length: the body runs to the close
            for _ in range(64):
                self.wfile.write(b"\0" * 1024)
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", str(len(IMAGE)))
            self.end_headers()
            for byte in IMAGE:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.05)

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client cut off at its deadline leaves the handler a broken pipe


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = QuietServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def assert_refused(url: str, reason: str, sources: MediaSources = QUICK, **limits: int) -> None:
    with pytest.raises(ImageInputError, match=reason) as raised:
        load_image_url(url, PART, ImageLimits(**limits), sources)
    assert raised.value.part_index == PART


def expected_pixels() -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(IMAGE)).convert("RGB"))


@pytest.mark.parametrize("path", ["/cat.png", "/moved"])
def test_an_http_url_decodes_to_the_served_pixels(base_url: str, path: str) -> None:
    image = load_image_url(base_url + path, PART, None, QUICK)
    np.testing.assert_array_equal(image.pixels, expected_pixels())


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/missing", "answered HTTP 404"),
        ("/text", "not an image in an accepted format"),
        ("/declared-huge", "1000000000 bytes; at most 4096 are accepted"),
        ("/undeclared-huge", "over 4096 bytes"),
        ("/loop", "HTTP 302"),
        ("/to-file", "HTTP 302.*not allowed"),
        ("/to-ftp", "non-http\\(s\\) URL"),
    ],
)
def test_hostile_http_sources_are_refused_naming_the_part(
    base_url: str, path: str, reason: str
) -> None:
    assert_refused(base_url + path, reason, max_encoded_bytes=4096)


def test_a_refused_connection_is_refused_naming_the_part() -> None:
    assert_refused(f"http://127.0.0.1:{unused_port()}/cat.png", "fetching .* failed")


@pytest.mark.parametrize("path", ["/drip", "/stall"])
def test_a_slow_server_is_cut_off_at_the_deadline(base_url: str, path: str) -> None:
    started = time.monotonic()
    assert_refused(base_url + path, "took longer than 0.5 s")
    assert time.monotonic() - started < 1.4  # the whole drip takes about 3 s, the stall 1.5


def test_allowed_media_domains_refuse_other_hosts_before_fetching(base_url: str) -> None:
    loopback = MediaSources(fetch_timeout=0.5, allowed_media_domains=frozenset({"127.0.0.1"}))
    image = load_image_url(base_url + "/cat.png", PART, None, loopback)
    np.testing.assert_array_equal(image.pixels, expected_pixels())
    elsewhere = MediaSources(allowed_media_domains=frozenset({"Images.Example.com"}))
    Handler.requested.clear()
    assert_refused(
        base_url + "/cat.png",
        r"host '127.0.0.1' is not in --allowed-media-domains \(images.example.com\)",
        elsewhere,
    )
    assert Handler.requested == []  # refused before anything was sent
    assert_refused(
        base_url + "/to-localhost", "host 'localhost' is not in --allowed-media-domains", loopback
    )
    assert Handler.requested == ["/to-localhost"]  # the redirect's target is never asked


def _front_end_only(monkeypatch) -> None:
    """`LLM(...)` builds its media options and stops short of resolving or loading a model."""
    monkeypatch.setattr("vllm_tvm.entrypoints.llm.resolve_engine", lambda args: args)
    monkeypatch.setattr(LLM, "_start", lambda self, args: None)


def test_llm_reads_the_fetch_timeout_variable_as_the_server_does(
    monkeypatch, base_url: str
) -> None:
    _front_end_only(monkeypatch)
    monkeypatch.setenv(IMAGE_FETCH_TIMEOUT_ENV, "0.25")
    llm = LLM("m", allowed_media_domains=["127.0.0.1"])
    assert llm.media_sources.fetch_timeout == fetch_timeout_from_environment() == 0.25
    part = {"type": "image_url", "image_url": {"url": base_url + "/stall"}}
    started = time.monotonic()
    with pytest.raises(ImageInputError, match=r"took longer than 0.25 s"):
        llm.chat_images([{"role": "user", "content": [part]}])
    assert time.monotonic() - started < 1.2
    monkeypatch.setenv(IMAGE_FETCH_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="VLLM_IMAGE_FETCH_TIMEOUT must be a number of seconds"):
        LLM("m")
    monkeypatch.delenv(IMAGE_FETCH_TIMEOUT_ENV)
    assert LLM("m").media_sources.fetch_timeout == DEFAULT_IMAGE_FETCH_TIMEOUT


def test_llm_holds_http_images_to_its_allowed_media_domains(monkeypatch, base_url: str) -> None:
    _front_end_only(monkeypatch)
    part = {"type": "image_url", "image_url": {"url": base_url + "/cat.png"}}
    conversation = [{"role": "user", "content": [part]}]
    with pytest.raises(ImageInputError, match=r"host '127\.0\.0\.1' is not in"):
        LLM("m", allowed_media_domains=["example.com"]).chat_images(conversation)
    image = LLM("m", allowed_media_domains=["127.0.0.1"]).chat_images(conversation)[0]
    np.testing.assert_array_equal(image.pixels, expected_pixels())


def test_local_files_are_read_only_under_the_allowed_directory(tmp_path: Path) -> None:
    allowed = tmp_path / "media"
    allowed.mkdir()
    (allowed / "cat.png").write_bytes(IMAGE)
    outside = tmp_path / "secret.png"
    outside.write_bytes(IMAGE)
    (allowed / "link.png").symlink_to(outside)
    sources = MediaSources(allowed_local_media_path=allowed)
    image = load_image_url((allowed / "cat.png").as_uri(), PART, None, sources)
    np.testing.assert_array_equal(image.pixels, expected_pixels())
    assert_refused((allowed / "cat.png").as_uri(), "without --allowed-local-media-path")
    traversal = f"file://{allowed}/../secret.png"
    assert_refused(traversal, "not under --allowed-local-media-path", sources)
    assert_refused((allowed / "link.png").as_uri(), "not under --allowed-local-media-path", sources)
    assert_refused((allowed / "none.png").as_uri(), "no such image file", sources)
    assert_refused(allowed.as_uri(), "is not a file", sources)
    big = MediaSources(allowed_local_media_path=allowed)
    assert_refused(
        (allowed / "cat.png").as_uri(), "at most 100 are accepted", big, max_encoded_bytes=100
    )


def test_limit_mm_per_prompt_parses_vllms_json_form() -> None:
    limits = parse_limit_mm_per_prompt('{"image": 2, "video": 0}')
    assert limits == {"image": 2, "video": 0}
    check_item_count(limits, "image", 2)
    with pytest.raises(ValueError, match=r"At most 2 image\(s\) may be provided in one prompt"):
        check_item_count(limits, "image", 3)
    check_item_count({}, "image", 999)  # vLLM's default for a modality not named
    with pytest.raises(ValueError, match="At most 999"):
        check_item_count({}, "image", 1000)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{image: 2}", "must be a JSON object such as"),
        ("[2]", "must be a JSON object of modality -> count"),
        ('{"picture": 2}', "modality 'picture'"),
        ('{"image": -1}', "whole number of 0 or more for 'image'"),
        ('{"image": "2"}', "whole number"),
        ('{"image": true}', "whole number"),
    ],
)
def test_a_bad_limit_mm_per_prompt_is_refused_naming_the_value(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as raised:
        parse_limit_mm_per_prompt(text)
    assert text in str(raised.value)


def test_llm_refuses_a_bad_limit_mm_per_prompt_before_loading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="modality 'picture'"):
        LLM(tmp_path / "no-such-model", limit_mm_per_prompt={"picture": 1})


def unloaded_llm(limits: dict[str, int], allowed: Path | None = None) -> LLM:
    """An LLM's front end with its media options set and no model loaded: the image checks
    run before the engine is reached."""
    llm = LLM.__new__(LLM)
    llm.limit_mm_per_prompt = limits
    llm.media_sources = MediaSources(allowed_local_media_path=allowed)
    return llm


def test_llm_holds_chat_and_generate_images_to_its_limit_and_directory(tmp_path: Path) -> None:
    (tmp_path / "cat.png").write_bytes(IMAGE)
    part = {"type": "image_url", "image_url": {"url": (tmp_path / "cat.png").as_uri()}}
    conversation = [{"role": "user", "content": [part, part]}]
    images = unloaded_llm({"image": 2}, tmp_path).chat_images(conversation)
    np.testing.assert_array_equal(images[1].pixels, expected_pixels())
    with pytest.raises(ImageInputError, match="without --allowed-local-media-path"):
        unloaded_llm({"image": 2}).chat_images(conversation)
    with pytest.raises(ValueError, match=r"At most 1 image\(s\)"):
        unloaded_llm({"image": 1}, tmp_path).chat_images(conversation)
    pil = Image.open(io.BytesIO(IMAGE))
    prompt = {"prompt": "<img><img>", "multi_modal_data": {"image": [pil, pil]}}
    with pytest.raises(ValueError, match=r"At most 1 image\(s\)"):
        unloaded_llm({"image": 1})._prompt_and_images(prompt)
