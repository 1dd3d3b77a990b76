"""Images through the user-facing surface of a tiny random Gemma3ForConditionalGeneration:
`LLM.chat` with an `image_url` data: URL (prompt ids as transformers' Gemma 3 processor
expands the rendered text, greedy tokens as transformers generates them), the openai client
through a live server on loopback (the engine's answer; an image fetched over http answers
as its bytes sent inline), hostile images, unreachable URLs, more images than
--limit-mm-per-prompt allows and non-image media as 400s naming the part or the limit, and
`vllm-tvm generate --image FILE`."""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import openai
import pytest
from gemma3_vision_helpers import gemma3_oracle, oracle_tokens
from PIL import Image
from server_helpers import live_server

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.sampling.params import SamplingParams

pytestmark = pytest.mark.slow

NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
MODEL_NAME = "tiny-vlm"
QUESTION = "What is in the picture?"


def _png(height: int, width: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def _messages(*urls: str) -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}]


@pytest.fixture(scope="module")
def llm(tiny_gemma3_vlm) -> LLM:
    return LLM(tiny_gemma3_vlm.path, device="cpu", show_progress=False)


@pytest.fixture(scope="module")
def server(tiny_gemma3_vlm):
    with live_server(
        tiny_gemma3_vlm.path,
        MODEL_NAME,
        limit_mm_per_prompt={"image": 2},
        image_fetch_timeout=2.0,
        allowed_media_domains=["127.0.0.1"],
    ) as live:
        yield live


def test_llm_chat_with_an_image_equals_transformers(llm: LLM, tiny_gemma3_vlm) -> None:
    from tokenizers import Tokenizer

    png = _png(48, 64, 1)
    ours = llm.chat(_messages(_data_url(png)), GREEDY)[0]
    checkpoint = tiny_gemma3_vlm.path
    rendered = (  # tiny_vlm.CHAT_TEMPLATE of the messages, the image part as its token
        f"<start_of_turn>user\n<start_of_image>\n{QUESTION}<end_of_turn>\n<start_of_turn>model\n"
    )
    soft = "<image_soft_token>" * 4
    expanded = rendered.replace(
        "<start_of_image>", f"\n\n<start_of_image>{soft}<end_of_image>\n\n"
    )  # transformers' Gemma3Processor.full_image_sequence
    ids = Tokenizer.from_file(str(checkpoint / "tokenizer.json")).encode(expanded).ids
    assert list(ours.prompt_token_ids) == ids
    image = DecodedImage(pixels=np.asarray(Image.open(io.BytesIO(png))), part_index=0)
    oracle = gemma3_oracle(tiny_gemma3_vlm)
    expected = oracle_tokens(oracle, tiny_gemma3_vlm, ids, [image], NEW_TOKENS)
    assert list(ours.outputs[0].token_ids) == expected


def test_openai_client_sends_images_through_serve(llm: LLM, server) -> None:
    messages = _messages(_data_url(_png(48, 64, 1)), _data_url(_png(30, 90, 2)))
    reply = server.client().chat.completions.create(
        model=MODEL_NAME, messages=messages, max_tokens=NEW_TOKENS, temperature=0.0
    )
    expected = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS))[0]
    assert reply.choices[0].message.content == expected.outputs[0].text
    assert reply.usage.prompt_tokens == len(expected.prompt_token_ids)


@pytest.fixture(scope="module")
def image_site(tmp_path_factory):
    """A loopback http server of a directory holding cat.png."""
    root = tmp_path_factory.mktemp("site")
    (root / "cat.png").write_bytes(_png(40, 56, 4))
    handler = functools.partial(QuietFiles, directory=str(root))
    site = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{site.server_address[1]}", root
    site.shutdown()
    site.server_close()


class QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_an_http_image_through_serve_answers_as_its_bytes_inline(
    llm: LLM, server, image_site
) -> None:
    base, root = image_site
    reply = server.client().chat.completions.create(
        model=MODEL_NAME, messages=_messages(f"{base}/cat.png"), max_tokens=8, temperature=0.0
    )
    inline = _messages(_data_url((root / "cat.png").read_bytes()))
    expected = llm.chat(inline, SamplingParams(temperature=0.0, max_tokens=8))[0]
    assert reply.choices[0].message.content == expected.outputs[0].text
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(
            model=MODEL_NAME, messages=_messages(f"{base}/gone.png"), max_tokens=1
        )
    message = caught.value.body["message"]
    assert message.startswith("messages[0].content[0]: ") and "HTTP 404" in message


def test_an_image_url_off_the_allowed_media_domains_is_a_400_naming_its_host(
    server, image_site
) -> None:
    """The same loopback site by another name: refused before it is fetched."""
    base, _ = image_site
    other_name = base.replace("127.0.0.1", "localhost")
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    messages[0]["content"].append(
        {"type": "image_url", "image_url": {"url": f"{other_name}/cat.png"}}
    )
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=1)
    body = caught.value.body
    assert body["message"] == (
        "messages[0].content[1]: the image URL's host 'localhost' is not in "
        "--allowed-media-domains (127.0.0.1)"
    )
    assert (body["type"], body["code"], body["param"]) == (
        "BadRequestError",
        400,
        "messages[0].content[1]",
    )


def test_more_images_than_limit_mm_per_prompt_is_a_400_naming_the_limit(server) -> None:
    url = _data_url(_png(8, 8, 5))
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(
            model=MODEL_NAME, messages=_messages(url, url, url), max_tokens=1
        )
    message = caught.value.body["message"]
    assert "At most 2 image(s) may be provided in one prompt" in message
    assert "--limit-mm-per-prompt" in message


def _huge_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("1", (8200, 8200)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (_data_url(_png(20, 20, 3)[:60]), "truncated or corrupt"),
        (_data_url(b"GIF89a not really"), "not an image"),
        (_data_url(b"plain text"), "not an image in an accepted format"),
        ("data:image/png;base64,@@@", "base64"),
    ],
)
def test_a_bad_image_is_a_400_naming_its_part(server, url: str, reason: str) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=1)
    message = caught.value.body["message"]
    assert message.startswith("messages[0].content[1]: ") and reason in message


def test_an_oversized_image_is_a_400_naming_its_part(server) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(
            model=MODEL_NAME, messages=_messages(_data_url(_huge_png())), max_tokens=1
        )
    message = caught.value.body["message"]
    assert message.startswith("messages[0].content[0]: ") and "pixels" in message


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,AAAA"}},
        {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
    ],
)
def test_audio_and_video_parts_stay_refused_by_name(llm: LLM, server, part: dict) -> None:
    """An OpenAI-shaped 400 through serve, a ValueError from `LLM.chat`: both name the part."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=1)
    body = caught.value.body
    assert caught.value.status_code == 400
    assert (body["type"], body["code"]) == ("BadRequestError", 400)
    assert f"messages[0]: unsupported content part {part['type']!r}" in body["message"]
    with pytest.raises(ValueError, match=f"unsupported content part {part['type']!r}"):
        llm.chat(messages, SamplingParams(max_tokens=1))


def test_generate_with_image_files_equals_llm_chat(
    llm: LLM, tiny_gemma3_vlm, tmp_path: Path
) -> None:
    pngs = [_png(48, 64, 1), _png(30, 90, 2)]
    files = []
    for index, png in enumerate(pngs):
        files.append(tmp_path / f"image{index}.png")
        files[-1].write_bytes(png)
    command = [
        sys.executable,
        "-m",
        "vllm_tvm.cli.main",
        "generate",
        "--model",
        str(tiny_gemma3_vlm.path),
        "--chat",
        "--prompt",
        QUESTION,
        "--max-tokens",
        str(NEW_TOKENS),
        "--json",
        "--image",
        str(files[0]),
        "--image",
        str(files[1]),
    ]
    root = str(Path(__file__).resolve().parents[1])
    result = subprocess.run(
        command, env={**os.environ, "PYTHONPATH": root}, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ours = json.loads(result.stdout)
    expected = llm.chat(
        _messages(*(_data_url(png) for png in pngs)),
        SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS),
    )[0]
    assert ours["prompt_token_ids"] == list(expected.prompt_token_ids)
    assert ours["token_ids"] == list(expected.outputs[0].token_ids)


def test_generate_names_an_image_file_that_is_not_an_image(tiny_gemma3_vlm, tmp_path: Path) -> None:
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    command = [
        sys.executable,
        "-m",
        "vllm_tvm.cli.main",
        "generate",
        "--model",
        str(tiny_gemma3_vlm.path),
        "--prompt",
        "hi",
        "--image",
        str(bad),
    ]
    root = str(Path(__file__).resolve().parents[1])
    result = subprocess.run(
        command, env={**os.environ, "PYTHONPATH": root}, capture_output=True, text=True
    )
    assert result.returncode != 0 and f"--image {bad}" in result.stderr
