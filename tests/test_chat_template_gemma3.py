"""Gemma 3's own chat template renders exactly as transformers' `apply_chat_template`.

llama.cpp's template collection (test_tokenization_chat_template.py) has no Gemma 3 template
and the Gemma 3 270M GGUF carries none, so the template comes from the PyPI package that
ships it as data: xinference 4.1.0's Gemma 3 model-family entries (multimodal and 1B), fetched
by tests/data/fetch_tokenizer_material.sh. transformers renders it with a tokenizer that knows
only Gemma's BOS and EOS; our renderer gets the same inputs, including the conversations the
template refuses (roles out of turn), which must fail for both.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from tokenization_material import GEMMA3_FAMILY_FILES, require

from vllm_tvm.runtime.tokenization import ChatTemplateError, render_chat_template

BOS, EOS = "<bos>", "<eos>"
CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_and_turns": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "  Blue.  "},
        {"role": "user", "content": 'Another, "quoted" & <tagged>.\n'},
    ],
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
        {
            "role": "user",
            "content": [
                {"type": "image"},
                {"type": "text", "text": " What is this? "},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Un chat."}]},
        {"role": "user", "content": "Merci"},
    ],
    "ends_with_the_model": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ],
}
OUT_OF_TURN = [
    {"role": "user", "content": "one"},
    {"role": "user", "content": "two"},
]


def _template(index: int) -> str:
    entries = json.loads(require(GEMMA3_FAMILY_FILES[index]).read_text(encoding="utf-8"))
    (entry,) = entries
    return entry["chat_template"]


@pytest.fixture(scope="module")
def hf_tokenizer() -> Any:
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({BOS: 0, EOS: 1}))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS
    )


def _hf_render(hf_tokenizer: Any, template: str, messages: list[dict[str, Any]], **kw: Any) -> str:
    return hf_tokenizer.apply_chat_template(
        copy.deepcopy(messages), chat_template=template, tokenize=False, **kw
    )


@pytest.mark.parametrize("index", range(len(GEMMA3_FAMILY_FILES)))
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_gemma3_template_renders_like_transformers(
    hf_tokenizer: Any, index: int, conversation: str, add_generation_prompt: bool
) -> None:
    template = _template(index)
    messages = CONVERSATIONS[conversation]
    expected = _hf_render(
        hf_tokenizer, template, messages, add_generation_prompt=add_generation_prompt
    )
    got = render_chat_template(
        template,
        messages,
        bos_token=BOS,
        eos_token=EOS,
        add_generation_prompt=add_generation_prompt,
    )
    assert got == expected
    assert expected.startswith(f"{BOS}<start_of_turn>user\n")
    assert expected.endswith("<start_of_turn>model\n") == add_generation_prompt


def test_both_gemma3_entries_carry_the_same_template() -> None:
    assert _template(0) == _template(1)


def test_gemma3_template_refuses_roles_out_of_turn_like_transformers(hf_tokenizer: Any) -> None:
    template = _template(0)
    with pytest.raises(Exception, match="roles must alternate"):
        _hf_render(hf_tokenizer, template, OUT_OF_TURN)
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        render_chat_template(template, OUT_OF_TURN, bos_token=BOS, eos_token=EOS)
