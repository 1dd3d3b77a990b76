"""Tool-call parsers read back what real chat templates render for an assistant's calls.

The oracle is the chat template: an assistant message with known tool calls is rendered by
the model's real template (llama.cpp's copies, fetched by tests/data/fetch_tokenizer_material.sh)
and the rendered assistant turn is what the model emits for those calls. Parsing it must give
back the same names, argument values and content. Streaming, in random splits, must rebuild
exactly the non-streaming result; malformed calls must come back as content without raising.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from parser_streams import SPLITS
from tool_parser_cases import (
    CONTENT,
    DEEPSEEK_ASSISTANT,
    DEEPSEEK_EOS,
    FILE,
    HERMES,
    IM,
    LLAMA,
    MISTRAL,
    PYTHONIC,
    RICH,
    TOOLS,
    WEATHER,
    Case,
    assert_stream_matches_extract,
    calls_of,
    conversation,
    rebuild,
    rendered_turn,
    streamed,
    tool_text,
)
from tool_parser_family_cases import AUTO_ONLY, FAMILY_CASES
from tool_parser_templates import load_template, template_names

from vllm_tvm.server.tool_parsers import (
    detect_tool_parser,
    get_tool_parser,
    tool_parser_names,
)

CASES = [
    Case(
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        "hermes",
        *IM,
        (WEATHER, RICH),
        variables=HERMES,
    ),
    Case("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes", *IM, (RICH,), variables=HERMES),
    Case("Qwen-Qwen2.5-7B-Instruct", "hermes", *IM, (RICH, FILE), content=CONTENT),
    Case("Qwen-QwQ-32B", "hermes", *IM, (WEATHER, FILE), content=CONTENT),
    Case("MiMo-VL", "hermes", *IM, (RICH,), content=CONTENT),
    Case("Bielik-11B-v3.0-Instruct", "hermes", *IM, (RICH, WEATHER)),
    Case("Reka-Edge", "hermes", "assistant: ", "\n\n<sep>", (RICH, FILE), content=CONTENT),
    Case(
        "ibm-granite-granite-4.0",
        "hermes",
        "<|start_of_role|>assistant<|end_of_role|>",
        "<|end_of_text|>\n",
        (RICH, WEATHER),
    ),
    Case(
        "ibm-granite-granite-4.1",
        "hermes",
        "<|start_of_role|>assistant<|end_of_role|>",
        "<|end_of_text|>\n",
        (FILE,),
    ),
    Case(
        "Qwen-Qwen3-0.6B",
        "hermes",
        *IM,
        (RICH, FILE),
        content=CONTENT,
        reasoning_parser="qwen3",
    ),
    Case("meta-llama-Llama-3.1-8B-Instruct", "llama3_json", *LLAMA, (RICH,)),
    Case("meta-llama-Llama-3.2-3B-Instruct", "llama3_json", *LLAMA, (FILE,)),
    Case("meta-llama-Llama-3.3-70B-Instruct", "llama3_json", *LLAMA, (WEATHER,)),
    Case(
        "mistralai-Mistral-Nemo-Instruct-2407",
        "mistral",
        "[/INST]",
        "</s>",
        (RICH, FILE),
        variables=MISTRAL,
    ),
    Case(
        "Mistral-Small-3.2-24B-Instruct-2506",
        "mistral",
        "[/INST]",
        "</s>",
        (RICH, FILE),
        variables=MISTRAL,
    ),
    Case(
        "unsloth-mistral-Devstral-Small-2507",
        "mistral",
        "[/INST]",
        "</s>",
        (WEATHER, RICH),
        content=CONTENT,
        variables=MISTRAL,
    ),
    Case(
        "mistralai-Ministral-3-14B-Reasoning-2512",
        "mistral",
        "[/INST]",
        "</s>",
        (FILE, RICH),
        content=CONTENT,
        variables=MISTRAL,
    ),
    Case("Qwen3-Coder", "qwen3_coder", *IM, (RICH, FILE), content=CONTENT),
    Case("Qwen3.5-4B", "qwen3_coder", *IM, (RICH, FILE), reasoning_parser="qwen3"),
    Case(
        "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "qwen3_coder",
        *IM,
        (FILE, RICH),
        reasoning_parser="qwen3",
    ),
    Case("StepFun3.5-Flash", "qwen3_coder", *IM, (RICH, WEATHER), reasoning_parser="qwen3"),
    Case(
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
        "deepseek_v3",
        DEEPSEEK_ASSISTANT,
        DEEPSEEK_EOS,
        (RICH, FILE),
        keep_none_content=True,
    ),
    Case(
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
        "deepseek_v3",
        DEEPSEEK_ASSISTANT,
        DEEPSEEK_EOS,
        (WEATHER, FILE),
        arguments_as_text=True,
        keep_none_content=True,
    ),
    Case(
        "llama-cpp-deepseek-r1",
        "deepseek_v3",
        DEEPSEEK_ASSISTANT,
        DEEPSEEK_EOS,
        (RICH, WEATHER),
        with_tools=False,
    ),
    Case(
        "deepseek-ai-DeepSeek-V3.1",
        "deepseek_v3",
        DEEPSEEK_ASSISTANT + "<think></think>",
        DEEPSEEK_EOS,
        (RICH, FILE),
        content=CONTENT,
    ),
    Case("LFM2.5-8B-A1B", "pythonic", *IM, (PYTHONIC, WEATHER), content=CONTENT),
]
CASES += FAMILY_CASES


# ------------------------------------------------------------------- real template round trips


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_template_rendering_parses_back_to_the_same_calls(case: Case) -> None:
    text = tool_text(case)
    content, calls = calls_of(get_tool_parser(case.dialect), text)
    assert calls == list(case.calls)
    assert content == case.content


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_streaming_in_random_splits_rebuilds_the_extracted_result(case: Case) -> None:
    assert_stream_matches_extract(get_tool_parser(case.dialect), tool_text(case))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_prefix_of_a_rendering_is_content_or_the_calls_completed_so_far(case: Case) -> None:
    # What a generation cut by max_tokens looks like, at every cut point.
    parser = get_tool_parser(case.dialect)
    text = tool_text(case)
    for end in range(0, len(text) + 1, case.prefix_stride):
        prefix = text[:end]
        content, calls = calls_of(parser, prefix)
        if calls:
            assert (content, calls) == (case.content, list(case.calls[: len(calls)]))
        else:
            assert content == (prefix or None)
        streamed_content, streamed_calls = rebuild(streamed(parser, prefix, seed=end, longest=4))
        names = [name for name, _arguments in case.calls]
        assert [name for _id, name, _args in streamed_calls] == names[: len(streamed_calls)]
        if not streamed_calls:
            assert streamed_content == (prefix or None)


def test_llama_3_1_renders_through_transformers_as_through_jinja() -> None:
    """The Jinja environment of these tests renders like transformers' apply_chat_template."""
    transformers_utils = pytest.importorskip("transformers.utils.chat_template_utils")
    case = CASES[[c.template for c in CASES].index("meta-llama-Llama-3.1-8B-Instruct")]
    rendered, _ = transformers_utils.render_jinja_template(
        conversations=[conversation(case)],
        tools=TOOLS,
        chat_template=load_template(case.template),
        date_string="26 Jul 2024",
    )
    assert rendered[0].rpartition(case.header)[2].removesuffix(case.end) == rendered_turn(case)


def test_deepseek_distill_llama_template_without_block_end_after_one_call() -> None:
    case = Case(
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
        "deepseek_v3",
        DEEPSEEK_ASSISTANT,
        "",
        (RICH,),
        arguments_as_text=True,
        keep_none_content=True,
    )
    text = rendered_turn(case)
    assert "<｜tool▁calls▁end｜>" not in text  # noqa: RUF001
    assert calls_of(get_tool_parser("deepseek_v3"), text) == (None, [RICH])


# -------------------------------------------------------------------------------------- auto

AUTO_EXPECTED = {case.template: case.auto for case in CASES} | AUTO_ONLY


@pytest.mark.parametrize("name", template_names() or ["(templates absent)"])
def test_auto_detects_each_real_template_dialect(name: str) -> None:
    template = load_template(name)
    assert detect_tool_parser(template) == AUTO_EXPECTED.get(name, "none")
    assert get_tool_parser("auto", chat_template=template).name == AUTO_EXPECTED.get(name, "none")


def test_auto_covers_every_format_a_real_template_renders() -> None:
    # Several names share a format (a reader); auto names one of them for each template.
    def reader(name: str) -> type:
        return get_tool_parser(name).reader_type

    assert {reader(n) for n in AUTO_EXPECTED.values()} >= {reader(c.dialect) for c in CASES}
    assert all(reader(case.auto) is reader(case.dialect) for case in CASES)
    assert set(AUTO_EXPECTED.values()) <= set(tool_parser_names()) - {"auto", "none"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_auto_parser_reads_its_templates_own_rendering(case: Case) -> None:
    parser = get_tool_parser("auto", chat_template=load_template(case.template))
    assert calls_of(parser, tool_text(case))[1] == list(case.calls)


# --------------------------------------------------------------------------------- registry


def test_unknown_parser_name_is_rejected_with_the_accepted_names() -> None:
    with pytest.raises(ValueError) as error:
        get_tool_parser("hermes2")
    message = str(error.value)
    assert "'hermes2'" in message
    for name in ("auto", "deepseek_v3", "hermes", "llama3_json", "mistral", "none"):
        assert name in message
    assert "pythonic" in message and "qwen3_coder" in message


def test_auto_without_a_chat_template_is_rejected() -> None:
    with pytest.raises(ValueError, match="chat template"):
        get_tool_parser("auto")


REFERENCE_NAMES = """hermes qwen3 qwen3_coder qwen3_xml deepseek_v3 deepseek_v31 deepseek_v32
deepseek_v4 llama3_json llama4_json llama4_pythonic pythonic mistral gemma4 functiongemma glm45
glm47 granite granite4 granite-20b-fc kimi_k2 minimax_m2 longcat xlam phi4_mini_json internlm
jamba step3 step3p5 olmo3 minicpm5 hy_v3 hunyuan_a13b apertus ernie45 gigachat3 seed_oss lfm2
poolside_v1 mimo muse_glimmer auto none""".split()


def test_parser_names_are_the_vllm_ones() -> None:
    assert len(REFERENCE_NAMES) == 43
    assert tool_parser_names() == sorted(REFERENCE_NAMES)


# -------------------------------------------------------------------------------------- ids


def test_call_ids_are_vllm_style_and_unique() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call>' * 3
    _content, calls = get_tool_parser("hermes").extract(text)
    assert all(re.fullmatch(r"chatcmpl-tool-[0-9a-f]{32}", call.id) for call in calls)
    assert len({call.id for call in calls}) == 3


def test_mistral_call_ids_are_nine_alphanumerics() -> None:
    text = '[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{"x": 1}'
    _content, calls = get_tool_parser("mistral").extract(text)
    assert [call.name for call in calls] == ["a", "b"]
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", call.id) for call in calls)
    streamer = get_tool_parser("mistral").streamer()
    headers = [d["tool_calls"][0] for d in streamer.feed(text) if "tool_calls" in d]
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", h["id"]) for h in headers if "id" in h)


def test_tool_call_converts_to_the_openai_message_shape() -> None:
    _content, [call] = get_tool_parser("hermes").extract(
        '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    )
    assert call.to_openai() == {
        "id": call.id,
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": 1}'},
    }


# ------------------------------------------------------------------------ plain content


@pytest.mark.parametrize("dialect", [n for n in tool_parser_names() if n != "auto"])
@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is sunny.",
        "  Leading and trailing whitespace stay.  \n",
        "A brace { and a bracket [ and a tag <b> and a pipe <|x|>.",
        "",
    ],
)
def test_text_without_calls_is_content_unchanged(dialect: str, text: str) -> None:
    parser = get_tool_parser(dialect)
    assert parser.extract(text) == ((text or None), [])
    assert_stream_matches_extract(parser, text)


@pytest.mark.parametrize(
    "text",
    ['{"answer": 42}', '{"name": "Bob", "age": 3}', "[1, 2, 3]", '{"name": "x"} is JSON'],
)
def test_llama3_json_leaves_json_answers_as_content(text: str) -> None:
    parser = get_tool_parser("llama3_json")
    assert parser.extract(text) == (text, [])
    assert_stream_matches_extract(parser, text)


@pytest.mark.parametrize("text", ["[1] is a citation", "[see above]", "[]"])
def test_pythonic_leaves_bracketed_text_as_content(text: str) -> None:
    parser = get_tool_parser("pythonic")
    assert parser.extract(text) == (text, [])
    assert_stream_matches_extract(parser, text)


# -------------------------------------------------------------------------- dialect details


def test_hermes_reads_arguments_given_as_a_json_string() -> None:
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": [1]}"}</tool_call>'
    parser = get_tool_parser("hermes")
    assert calls_of(parser, text) == (None, [("f", {"a": [1]})])
    assert_stream_matches_extract(parser, text)


def test_hermes_reads_arguments_written_before_the_name() -> None:
    text = 'Sure.\n<tool_call>\n{"arguments": {"a": "}"}, "name": "f"}\n</tool_call>'
    parser = get_tool_parser("hermes")
    assert calls_of(parser, text) == ("Sure.", [("f", {"a": "}"})])
    assert_stream_matches_extract(parser, text)


def test_hermes_tolerates_a_final_call_cut_before_its_closing_tag() -> None:
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool'
    assert calls_of(get_tool_parser("hermes"), text) == (None, [("f", {"a": 1})])


def test_llama3_json_reads_python_tag_and_semicolon_separated_calls() -> None:
    text = '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}'
    parser = get_tool_parser("llama3_json")
    assert calls_of(parser, text) == (None, [("a", {"x": 1}), ("b", {})])
    assert_stream_matches_extract(parser, text)


def test_mistral_v3_reads_a_list_with_ids_and_content_before_it() -> None:
    text = 'On it. [TOOL_CALLS] [{"name": "a", "arguments": {"x": "]"}, "id": "abcdefghi"}]'
    parser = get_tool_parser("mistral")
    assert calls_of(parser, text) == ("On it.", [("a", {"x": "]"})])
    assert_stream_matches_extract(parser, text)


def test_deepseek_reads_pretty_printed_fenced_arguments() -> None:
    # The call format llama.cpp's DeepSeek R1 template shows the model in its system prompt.
    text = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"  # noqa: RUF001
        '```json\n{\n  "city": "Paris"\n}\n```\n<｜tool▁call▁end｜><｜tool▁calls▁end｜>'  # noqa: RUF001
    )
    parser = get_tool_parser("deepseek_v3")
    assert calls_of(parser, text) == (None, [("get_weather", {"city": "Paris"})])
    assert_stream_matches_extract(parser, text)


def test_pythonic_reads_an_unwrapped_list_with_json_literals_and_trailing_comma() -> None:
    text = "[a(x=1, y='s', z=null,), b.c(), d(w=[true, -2.5e3])]"
    parser = get_tool_parser("pythonic")
    assert calls_of(parser, text) == (
        None,
        [("a", {"x": 1, "y": "s", "z": None}), ("b.c", {}), ("d", {"w": [True, -2500.0]})],
    )
    assert_stream_matches_extract(parser, text)


def test_pythonic_reads_triple_quoted_and_escaped_strings() -> None:
    text = """[f(a='''x ' '' y''', b="q\\"), ]", c='')]"""
    parser = get_tool_parser("pythonic")
    assert calls_of(parser, text) == (None, [("f", {"a": "x ' '' y", "b": 'q"), ]', "c": ""})])
    assert_stream_matches_extract(parser, text)


@pytest.mark.parametrize(
    ("raw", "schema", "expected"),
    [
        ("3", {"type": "integer"}, 3),
        ("3", {"type": "string"}, "3"),
        ("3", None, "3"),
        ("2.5", {"type": "number"}, 2.5),
        ("True", {"type": "boolean"}, True),
        ("false", {"type": "boolean"}, False),
        ("None", {"type": ["string", "null"]}, None),
        ("None", {"type": "string"}, "None"),
        ("['a', 1]", {"type": "array"}, ["a", 1]),
        ('{"k": null}', {"type": "object"}, {"k": None}),
        ("7", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, 7),
        ("abc", {"type": "integer"}, "abc"),
    ],
)
def test_qwen3_coder_types_values_by_schema_as_the_template_renders_them(
    raw: str, schema: dict[str, Any] | None, expected: Any
) -> None:
    # The template writes `value | string` for scalars and `value | tojson` for containers.
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {}}}}]
    if schema is not None:
        tools[0]["function"]["parameters"]["properties"]["p"] = schema
    text = (
        f"<tool_call>\n<function=f>\n<parameter=p>\n{raw}\n</parameter>\n</function>\n</tool_call>"
    )
    _content, [call] = get_tool_parser("qwen3_coder").extract(text, tools)
    assert json.loads(call.arguments) == {"p": expected}


# -------------------------------------------------------------------------------- malformed

MALFORMED_BEFORE_ANY_CALL = {
    "hermes": [
        "Sure.\n<tool_call>\nnot json\n</tool_call>",
        '<tool_call>{"name": "f", "arguments": {"a": 1,}}</tool_call>',
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": 3, "arguments": {}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
        '<tool_call>{"name": "f", "arguments": {"a": 1}',
    ],
    "llama3_json": [
        '{"name": "f", "parameters": {"a": }}',
        '{"name": "f", "parameters": {"a": 1}',
        '<|python_tag|>print("hi")',
    ],
    "mistral": [
        "[TOOL_CALLS] not a call",
        '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}]',
        "[TOOL_CALLS]f[ARGS]{broken",
        "[TOOL_CALLS]f[ARGS][1, 2]",
        '[TOOL_CALLS]bad name[ARGS]{"a": 1}',
    ],
    "pythonic": [
        "[f(1, 2)]",
        "[f(a=__import__('os').system('echo pwned'))]",
        "[f(a=open('x'))]",
        "[f(a=1 + 2)]",
        "[f(a=1, a=2)]",
        "[f(a=1)] and then some text",
        "[f(a='unterminated)]",
        "<|tool_call_start|>[f(a=[1)]<|tool_call_end|>",
    ],
    "qwen3_coder": [
        "<tool_call>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\ntext\n</function>\n</tool_call>",
        "<tool_call>\n<function=f\n<parameter=a>1</parameter></function>",
    ],
    "deepseek_v3": [
        "<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>",  # noqa: RUF001
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{nope}\n```",  # noqa: RUF001
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]<｜tool▁call▁end｜>",  # noqa: RUF001
        "<｜tool▁calls▁begin｜>just text",  # noqa: RUF001
    ],
}


@pytest.mark.parametrize(
    ("dialect", "text"),
    [(d, t) for d, texts in MALFORMED_BEFORE_ANY_CALL.items() for t in texts],
)
def test_malformed_call_falls_back_to_content(dialect: str, text: str) -> None:
    parser = get_tool_parser(dialect)
    assert parser.extract(text, TOOLS) == (text, [])
    for seed, longest in SPLITS:
        content, calls = rebuild(streamed(parser, text, seed, longest))
        # Streaming may already have announced a call whose arguments then failed; whatever
        # it sent, no text is lost and nothing raises.
        if not calls:
            assert content == text


@pytest.mark.parametrize("dialect", [n for n in tool_parser_names() if n != "auto"])
def test_garbage_never_raises(dialect: str) -> None:
    rng = random.Random(dialect)
    alphabet = [*"{}[]()\"'\\,:;=<>/|_ \n", "<tool_call>", "</tool_call>", "[TOOL_CALLS]"]
    alphabet += ["[ARGS]", "<function=", "<parameter=", "</parameter>", "</function>"]
    alphabet += ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "name"]  # noqa: RUF001
    alphabet += ['"name"', '"arguments"', "f", "a=", "<|python_tag|>", "<|tool_call_start|>"]
    alphabet += ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", '<invoke name="']
    alphabet += ['<parameter name="', "</invoke>", "<minimax:tool_call>", "<|tool_call>", "call:"]
    alphabet += ['<|"|>', "<tool_call|>", "<tool_calls>", "</tool_calls>", "<|tool_call|>"]
    alphabet += [
        "functools",
        "<|tools_prefix|>",
        "<function_calls>",
        "<|tool_calls_section_begin|>",
    ]
    alphabet += ["<|tool_call_begin|>", "<|tool_call_argument_begin|>", '">', "<seed:tool_call>"]
    parser = get_tool_parser(dialect)
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        _content, calls = parser.extract(text, TOOLS)
        for call in calls:
            assert isinstance(json.loads(call.arguments), dict)
        rebuild(streamed(parser, text, seed=len(text), longest=3))
