"""Every tool-call parser name reads its family's documented format.

Names whose family ships a chat template offline are round-tripped through it in
test_tool_parsers.py; the others are checked here against the call format their model
cards and vLLM's parser of the same name document, written out literally. Each sample is
read whole and in random stream splits (which must agree), and each family's malformed
calls come back as content.
"""

from __future__ import annotations

from typing import Any

import pytest
from parser_streams import SPLITS
from test_tool_parsers import CASES
from tool_parser_cases import (
    RICH,
    TOOLS,
    assert_stream_matches_extract,
    calls_of,
    rebuild,
    streamed,
)
from tool_parser_templates import load_template, render

from vllm_tvm.server.reasoning_parsers import get_reasoning_parser
from vllm_tvm.server.tool_parsers import get_tool_parser, tool_parser_names

PARIS = ("get_weather", {"city": "Paris", "days": 3})
FILE = ("write_file", {"path": "a.py", "body": "x = '}'"})
PARIS_JSON = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
FILE_JSON = '{"name": "write_file", "arguments": {"path": "a.py", "body": "x = \'}\'"}}'
QWEN_XML = (
    "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n"
    "<parameter=body>\nx = '}'\n</parameter>\n</function>\n</tool_call>"
)
STEP3_BEGIN = "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>"  # noqa: RUF001
STEP3_END = "<｜tool_call_end｜><｜tool_calls_end｜>"  # noqa: RUF001
DEEPSEEK_V31 = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"  # noqa: RUF001
    '{"city": "Paris", "days": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'  # noqa: RUF001
)
HERMES_TEXT = (
    f"Sure.\n<tool_call>\n{PARIS_JSON}\n</tool_call>\n<tool_call>\n{FILE_JSON}\n</tool_call>"
)

# name -> (generated text, expected content, expected calls)
SAMPLES: dict[str, tuple[str, str | None, list[tuple[str, dict[str, Any]]]]] = {
    "qwen3": (
        f"Sure.\n<tool_call>\n{PARIS_JSON}\n</tool_call>\n{QWEN_XML}",
        "Sure.",
        [PARIS, FILE],
    ),
    "mimo": (f"{QWEN_XML}\n<tool_call>{PARIS_JSON}</tool_call>", None, [FILE, PARIS]),
    "qwen3_xml": (f"Sure.\n{QWEN_XML}", "Sure.", [FILE]),
    "step3p5": (QWEN_XML, None, [FILE]),
    "granite4": (HERMES_TEXT, "Sure.", [PARIS, FILE]),
    "ernie45": (HERMES_TEXT, "Sure.", [PARIS, FILE]),
    "deepseek_v31": (f"Sure.{DEEPSEEK_V31}", "Sure.", [PARIS]),
    "llama4_json": (
        '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}',
        None,
        [PARIS],
    ),
    "llama4_pythonic": (
        "<|python_start|>[get_weather(city='Paris', days=3), "
        "write_file(path='a.py', body=\"x = '}'\")]<|python_end|>",
        None,
        [PARIS, FILE],
    ),
    "lfm2": (
        'Sure.<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>Checking.',
        "Sure.",
        [PARIS],
    ),
    "granite": (f"<|tool_call|>[{PARIS_JSON}, {FILE_JSON}]", None, [PARIS, FILE]),
    "granite-20b-fc": (
        f"Sure. <function_call> {PARIS_JSON} <function_call> {FILE_JSON}",
        "Sure.",
        [PARIS, FILE],
    ),
    "longcat": (f"<longcat_tool_call>{PARIS_JSON}</longcat_tool_call>", None, [PARIS]),
    "xlam": (f"[{PARIS_JSON}, {FILE_JSON}]", None, [PARIS, FILE]),
    "phi4_mini_json": (f"functools[{PARIS_JSON}, {FILE_JSON}]", None, [PARIS, FILE]),
    "xlam (fenced)": (f"Sure.\n```json\n[{PARIS_JSON}]\n```", "Sure.", [PARIS]),
    "xlam (tagged)": (f"[TOOL_CALLS][{FILE_JSON}]", None, [FILE]),
    "internlm": (
        'Sure.<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": '
        '{"city": "Paris", "days": 3}}<|action_end|>',
        "Sure.",
        [PARIS],
    ),
    "jamba": (f"<tool_calls>[{PARIS_JSON}, {FILE_JSON}]</tool_calls>", None, [PARIS, FILE]),
    "hunyuan_a13b": (f"Sure.\n<tool_calls>[{FILE_JSON}]</tool_calls>", "Sure.", [FILE]),
    "step3": (
        f'Sure.{STEP3_BEGIN}<steptml:invoke name="get_weather"><steptml:parameter name="city">'
        'Paris</steptml:parameter><steptml:parameter name="days">3</steptml:parameter>'
        f"</steptml:invoke>{STEP3_END}",
        "Sure.",
        [PARIS],
    ),
    "olmo3": (
        "<function_calls>get_weather(city=\"Paris\", days=3)\nwrite_file(path='a.py', "
        "body=\"x = '}'\")</function_calls>",
        None,
        [PARIS, FILE],
    ),
    "muse_glimmer": (
        '<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">'
        'Paris</atem:parameter>\n<atem:parameter name="days">3</atem:parameter>\n</atem:invoke>\n'
        "</atem:function_calls>",
        None,
        [PARIS],
    ),
    "functiongemma": (
        "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}"
        "<end_function_call><start_function_call>call:write_file{path:<escape>a.py<escape>,"
        "body:<escape>x = '}'<escape>}<end_function_call>",
        None,
        [PARIS, FILE],
    ),
    "gemma4": ('Sure. call:get_weather{city:<|"|>Paris<|"|>,days:3}', "Sure.", [PARIS]),
}


def test_every_parser_name_is_tested_on_its_format() -> None:
    tested = {case.dialect for case in CASES} | {name.split()[0] for name in SAMPLES}
    assert tested == set(tool_parser_names()) - {"auto", "none"}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_documented_format_parses_whole_and_streamed(name: str) -> None:
    text, content, calls = SAMPLES[name]
    parser = get_tool_parser(name.split()[0])
    assert calls_of(parser, text) == (content, calls)
    assert_stream_matches_extract(parser, text)


MALFORMED = {
    "granite": [f"<|tool_call|>[{PARIS_JSON},", "<|tool_call|>[1, 2]"],
    "xlam": ['[{"name": "get_weather"}]', "[1, 2, 3]", '{"answer": 42}'],
    "phi4_mini_json": ["functools[not json]", 'functools[{"name": "f", "arguments": {"a": }}]'],
    "jamba": ["<tool_calls>[{broken}]</tool_calls>", "<tool_calls>[]</tool_calls>"],
    "internlm": ["<|action_start|><|plugin|>\nprint(1)<|action_end|>"],
    "apertus": ['<|tools_prefix|>[{"f": [1]}]<|tools_suffix|>', "<|tools_prefix|>[{3: {}}]"],
    "gigachat3": ["Hi<|message_sep|>\n\nfunction call<|role_sep|>\n{oops}"],
    "glm45": ["<tool_call>f\n<arg_value>1</arg_value></tool_call>", "<tool_call>\n</tool_call>"],
    "hy_v3": ["<tool_calls:opensource>text</tool_calls:opensource>"],
    "minimax_m2": [
        '<minimax:tool_call><invoke name="f"><parameter name="a">1</invoke></minimax:tool_call>',
        "<minimax:tool_call></minimax:tool_call>",
    ],
    "deepseek_v32": ['<｜DSML｜function_calls>\n<｜DSML｜invoke name="f\n'],  # noqa: RUF001
    "step3": [f"{STEP3_BEGIN}<steptml:invoke>{STEP3_END}"],
    "minicpm5": ['<function name="f"><param name="a">1</function>'],
    "seed_oss": ["<seed:tool_call>\n<parameter=a>1</parameter>\n</seed:tool_call>"],
    "kimi_k2": ["<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_end|>"],
    "gemma4": ['<|tool_call>call:f{a:<|"|>open<tool_call|>', "<|tool_call>call:{a:1}<tool_call|>"],
    "functiongemma": ["<start_function_call>call:f{a:b c}<end_function_call>"],
    "olmo3": ["<function_calls>get_weather(city=open('x'))</function_calls>"],
    "muse_glimmer": ['<atem:function_calls><atem:invoke name="f"><oops/></atem:function_calls>'],
}


@pytest.mark.parametrize(
    ("name", "text"), [(n, t) for n, texts in MALFORMED.items() for t in texts]
)
def test_malformed_call_is_left_as_content(name: str, text: str) -> None:
    parser = get_tool_parser(name)
    assert parser.extract(text, TOOLS) == (text, [])
    for seed, longest in SPLITS:
        content, calls = rebuild(streamed(parser, text, seed, longest))
        if not calls:
            assert content == text


def test_deepseek_dsml_types_values_by_their_string_attribute() -> None:
    text = (
        '<｜DSML｜function_calls><｜DSML｜invoke name="f"><｜DSML｜parameter name="a" '  # noqa: RUF001
        'string="true">3</｜DSML｜parameter><｜DSML｜parameter name="b" string="false">'  # noqa: RUF001
        "[3]</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>"  # noqa: RUF001
    )
    assert calls_of(get_tool_parser("deepseek_v32"), text) == (None, [("f", {"a": "3", "b": [3]})])


def test_kimi_k2_name_drops_the_functions_prefix_and_index() -> None:
    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:7"
        '<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )
    assert calls_of(get_tool_parser("kimi_k2"), text) == (None, [PARIS])


def test_bare_json_dialects_leave_a_json_answer_as_content() -> None:
    for name in ("xlam", "granite"):
        for text in ('{"answer": 42}', '[{"name": "Bob", "age": 3}]', "[1] is a citation"):
            assert get_tool_parser(name).extract(text) == (text, [])


def test_muse_glimmer_reads_calls_out_of_the_channel_framing_its_template_renders() -> None:
    template = load_template("muse-glimmer")
    user = [{"role": "user", "content": "What is the weather in Paris?"}]
    tool_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate((RICH, FILE))
    ]
    turn = {"role": "assistant", "reasoning_content": "Look it up.", "tool_calls": tool_calls}
    prompt = render(template, user, add_generation_prompt=True, tools=TOOLS)
    full = render(template, [*user, turn], add_generation_prompt=False, tools=TOOLS)
    assert full.startswith(prompt) and full.endswith("<|eot|>")
    output = full[len(prompt) : -len("<|eot|>")]
    reasoning, text = get_reasoning_parser("muse_glimmer").extract(output)
    assert reasoning == "Look it up." and text is not None
    parser = get_tool_parser("muse_glimmer")
    assert calls_of(parser, text) == (None, [RICH, FILE])
    assert_stream_matches_extract(parser, text)
    answer = " to=user<|message|>It is sunny."
    assert parser.extract(answer) == ("It is sunny.", [])
    assert_stream_matches_extract(parser, answer)
