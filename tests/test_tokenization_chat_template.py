"""Chat templates render exactly as HF transformers' `apply_chat_template(tokenize=False)`.

The oracle renders llama.cpp's collection of 71 real chat templates through transformers
with a minimal tokenizer that knows only a BOS and an EOS token; our renderer gets the same
inputs. Where transformers fails on an input, ours must fail too.
"""

from __future__ import annotations

import copy
import sys
import time
from typing import Any

import pytest
from tokenization_material import LLAMA_CPP_TEMPLATES

from vllm_tvm.runtime.tokenization import ChatTemplateError, render_chat_template

BOS, EOS = "<s>", "</s>"
TEMPLATE_NAMES = (
    sorted(p.stem for p in LLAMA_CPP_TEMPLATES.glob("*.jinja"))
    if LLAMA_CPP_TEMPLATES.is_dir()
    else []
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. <Paris> & co"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "single_user": ([{"role": "user", "content": "Hello!"}], {}),
    "multi_turn_with_system": (
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": 'Another, "quoted" & <tagged>.'},
        ],
        {},
    ),
    "tool_call_round_trip": (
        [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "22C"},
        ],
        {"tools": [WEATHER_TOOL]},
    ),
    "tool_call_with_string_arguments": (
        [
            {"role": "system", "content": "Use tools when useful."},
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": '{"temp": -3}'},
            {"role": "assistant", "content": "It is -3 degrees."},
        ],
        {"tools": [WEATHER_TOOL]},
    ),
    "cohere_style_tool_definitions": (
        [{"role": "user", "content": "Search the news."}],
        {
            "tools": [
                {
                    "name": "internet_search",
                    "description": "Searches the web.",
                    "parameter_definitions": {
                        "query": {"description": "What to search", "type": "str", "required": True}
                    },
                }
            ]
        },
    ),
    "template_specific_variables": (
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        {"functions": '[{"name": "noop"}]', "datetime": "2025-01-31"},
    ),
    "reasoning_without_thinking": (
        [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
            {"role": "user", "content": "3+3?"},
        ],
        {"enable_thinking": False},
    ),
}


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


def _template(name: str) -> str:
    return (LLAMA_CPP_TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


def test_llama_cpp_template_collection_is_present() -> None:
    if not TEMPLATE_NAMES:
        pytest.skip(f"{LLAMA_CPP_TEMPLATES} absent (run tests/data/fetch_tokenizer_material.sh)")
    assert len(TEMPLATE_NAMES) >= 70


def _outcome(render: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    """("ok", text) or ("error", "") for one rendering."""
    try:
        return "ok", render(*args, **kwargs)
    except Exception:  # any failure counts: the oracle fails with many exception types
        return "error", ""


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_real_template_renders_like_transformers(hf_tokenizer: Any, name: str) -> None:
    template = _template(name)
    differences = []
    rendered = 0
    for conversation, (messages, extra) in sorted(CONVERSATIONS.items()):
        for add_generation_prompt in (True, False):
            kwargs = {"add_generation_prompt": add_generation_prompt, **extra}
            expected = _outcome(_hf_render, hf_tokenizer, template, messages, **kwargs)
            got = _outcome(
                render_chat_template, template, messages, bos_token=BOS, eos_token=EOS, **kwargs
            )
            rendered += expected[0] == "ok"
            if got != expected:
                differences.append((conversation, add_generation_prompt, expected, got))
    assert differences == []
    assert rendered > 0, "transformers rendered none of the conversations"


def test_tojson_keeps_html_characters_and_unicode_like_transformers(hf_tokenizer: Any) -> None:
    template = "{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=2, sort_keys=true) }}"
    messages = [{"role": "user", "content": "<b>&'\" é 你好"}]
    expected = _hf_render(hf_tokenizer, template, messages)
    assert render_chat_template(template, messages) == expected
    assert "<b>&" in expected


def test_raise_exception_surfaces_as_chat_template_error() -> None:
    template = (
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('need a system') }}{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="need a system"):
        render_chat_template(template, [{"role": "user", "content": "x"}])


def test_syntax_error_is_reported_as_chat_template_error() -> None:
    with pytest.raises(ChatTemplateError, match="does not compile"):
        render_chat_template("{% for m in messages %}", [])


def test_strftime_now_formats_the_current_date(hf_tokenizer: Any) -> None:
    template = "{{ strftime_now('%Y-%m-%d') }}"
    messages = [{"role": "user", "content": "x"}]
    assert render_chat_template(template, messages) == _hf_render(hf_tokenizer, template, messages)


def test_generation_block_renders_its_body(hf_tokenizer: Any) -> None:
    template = (
        "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    )
    messages = [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]
    expected = _hf_render(hf_tokenizer, template, messages)
    assert render_chat_template(template, messages) == expected == "[a][b]"


def test_special_tokens_are_undefined_when_unknown(hf_tokenizer: Any) -> None:
    template = "{{ bos_token is defined }}{{ eos_token | default('none') }}"
    assert render_chat_template(template, [{"role": "user", "content": "x"}]) == "Falsenone"
    assert render_chat_template(template, [], bos_token="<s>", eos_token="</s>") == "True</s>"


def test_extra_keywords_reach_the_template(hf_tokenizer: Any) -> None:
    template = "{{ bos_token }}-{{ enable_thinking }}"
    messages = [{"role": "user", "content": "x"}]
    expected = _hf_render(hf_tokenizer, template, messages, enable_thinking=False)
    got = render_chat_template(template, messages, bos_token=BOS, enable_thinking=False)
    assert got == expected == "<s>-False"


def test_none_valued_message_keys_are_dropped(hf_tokenizer: Any) -> None:
    template = "{% for m in messages %}{{ m.tool_calls is defined }}{% endfor %}"
    messages = [{"role": "assistant", "content": "x", "tool_calls": None}]
    assert render_chat_template(template, messages) == _hf_render(hf_tokenizer, template, messages)


def test_reasoning_is_visible_under_its_aliases(hf_tokenizer: Any) -> None:
    template = "{% for m in messages %}{{ m.reasoning_content }}/{{ m.thinking }}{% endfor %}"
    messages = [{"role": "assistant", "content": "x", "reasoning": "because"}]
    expected = _hf_render(hf_tokenizer, template, messages)
    assert render_chat_template(template, messages) == expected == "because/because"


def test_continue_final_message_stops_after_its_content(hf_tokenizer: Any) -> None:
    template = (
        _template("Qwen-Qwen2.5-7B-Instruct")
        if TEMPLATE_NAMES
        else ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}")
    )
    messages = [
        {"role": "user", "content": "Write a haiku."},
        {"role": "assistant", "content": "Autumn moon"},
    ]
    expected = _hf_render(
        hf_tokenizer, template, messages, continue_final_message=True, add_generation_prompt=False
    )
    got = render_chat_template(
        template, messages, continue_final_message=True, add_generation_prompt=False
    )
    assert got == expected
    assert got.endswith("Autumn moon")


def test_continue_final_message_refuses_a_generation_prompt() -> None:
    with pytest.raises(ChatTemplateError, match="cannot both be set"):
        render_chat_template(
            "{{ messages }}", [{"role": "user", "content": "x"}], continue_final_message=True
        )


def test_templates_cannot_reach_python_internals() -> None:
    template = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(ChatTemplateError):
        render_chat_template(template, [{"role": "user", "content": "x"}])


# ------------------------------------------------------------------------ render bounds
HELLO = [{"role": "user", "content": "Hello!"}]


@pytest.mark.parametrize(
    ("template", "named"),
    [
        ("{{ 1/0 }}", "ZeroDivisionError"),
        ("{% for i in range(100001) %}{% endfor %}", "OverflowError"),
        ("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{{ 'x' * 100000000 }}", "repeats a sequence"),
        ("{{ [1] * 100000000 }}", "repeats a sequence"),
        ("{{ 10 ** 100000 }}", "to the power"),
    ],
)
def test_a_failing_or_oversized_template_is_a_chat_template_error(template, named):
    with pytest.raises(ChatTemplateError, match=named):
        render_chat_template(template, HELLO)


def test_a_template_looping_past_the_time_bound_stops(monkeypatch):
    from vllm_tvm.runtime.tokenization import template_limits

    monkeypatch.setattr(template_limits, "MAX_RENDER_SECONDS", 0.5)
    nested = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    started = time.monotonic()
    with pytest.raises(ChatTemplateError, match=r"more than 0\.5 s"):
        render_chat_template(nested, HELLO)
    assert time.monotonic() - started < 3
    assert render_chat_template("{{ messages[0].content }}", HELLO) == "Hello!"


def test_output_past_the_size_bound_is_refused(monkeypatch):
    from vllm_tvm.runtime.tokenization import template_limits

    monkeypatch.setattr(template_limits, "MAX_OUTPUT_CHARS", 1000)
    assert len(render_chat_template("{% for i in range(100) %}0123456789{% endfor %}", HELLO))
    with pytest.raises(ChatTemplateError, match="output passed the limit of 1000"):
        render_chat_template("{% for i in range(101) %}0123456789{% endfor %}", HELLO)


def test_rendering_restores_the_threads_trace_function():
    calls: list[str] = []

    def tracer(frame: Any, event: str, arg: Any) -> None:
        calls.append(event)

    sys.settrace(tracer)
    try:
        render_chat_template("{{ messages[0].content }}", HELLO)
        restored = sys.gettrace()
    finally:
        sys.settrace(None)
    assert restored is tracer
