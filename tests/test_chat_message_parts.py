"""Content parts a text-only model cannot see are refused by their type, before any
template renders: audio, video and file parts, as the image part is in the server tests."""

from __future__ import annotations

import pytest

from vllm_tvm.runtime.tokenization.chat_messages import (
    UnsupportedContentError,
    template_messages,
)

NON_TEXT_PARTS = [
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
    {"type": "file", "file": {"file_data": "AAAA", "filename": "a.pdf"}},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
]


@pytest.mark.parametrize("part", NON_TEXT_PARTS, ids=lambda part: part["type"])
def test_a_non_text_part_is_refused_naming_its_type_and_message(part) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, part]},
    ]
    with pytest.raises(UnsupportedContentError) as caught:
        template_messages(messages)
    assert str(caught.value).startswith(f"messages[1]: unsupported content part '{part['type']}'")


def test_text_parts_around_no_other_part_are_joined() -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "b"}],
        }
    ]
    assert template_messages(messages)[0]["content"] == "a\nb"
