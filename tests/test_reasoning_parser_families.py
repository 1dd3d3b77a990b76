"""Every reasoning parser name splits its family's output where its chat template puts the tags.

The oracle is the real template where one ships offline: the model's output is what the
template renders after the generation prompt for an assistant turn with reasoning and an
answer, and whether the prompt opened the tag decides the convention. Other families are
checked on the conventions their model cards and vLLM's parsers document. Every split also
runs streamed in random pieces, which must agree with the whole-text split.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_reasoning_parsers import ANSWER, REASONING, USER, assert_stream_matches_extract
from tool_parser_templates import load_template, render, template_names

from vllm_tvm.cli.main import build_parser
from vllm_tvm.server.reasoning_parsers import (
    detect_reasoning_parser,
    get_reasoning_parser,
    reasoning_parser_choices,
    reasoning_parser_for,
)
from vllm_tvm.server.tool_parsers import tool_parser_names

REFERENCE = """think_auto deepseek_r1 deepseek_v3 holo2 mistral minimax_m2
minimax_m2_append_think step3 olmo3 muse_glimmer auto none""".split()
ASSISTANT = {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING}


def continuation(template: str, end: str, **variables: Any) -> str:
    """What the model writes after the generation prompt for ``ASSISTANT``, per the template."""
    text = load_template(template)
    prompt = render(text, USER, add_generation_prompt=True, **variables)
    full = render(text, [*USER, ASSISTANT], add_generation_prompt=False, **variables)
    assert full.startswith(prompt)
    output = full[len(prompt) :]
    assert output.endswith(end)
    return output[: len(output) - len(end)]


def test_every_reference_name_is_accepted() -> None:
    assert set(REFERENCE) <= set(reasoning_parser_choices())
    for name in reasoning_parser_choices():
        args = build_parser().parse_args(["serve", "--reasoning-parser", name])
        assert args.reasoning_parser == name
    for name in tool_parser_names():
        assert build_parser().parse_args(["serve", "--tool-call-parser", name])


def test_minimax_m2_reads_the_reasoning_its_prompt_opened() -> None:
    text = continuation("MiniMax-M2", "[e~[\n")
    assert not text.startswith("<think>")
    parser = get_reasoning_parser("minimax_m2")
    assert parser.extract(text) == (REASONING, ANSWER)
    assert_stream_matches_extract(parser, text)


def test_minimax_m2_append_think_keeps_the_reasoning_in_the_content() -> None:
    text = continuation("MiniMax-M2", "[e~[\n")
    parser = get_reasoning_parser("minimax_m2_append_think")
    reasoning, content = parser.extract(text)
    assert (reasoning, content) == (None, "<think>" + text)
    # What the template reads back from the history is the same reasoning and answer.
    assert content is not None and content.split("</think>")[-1].strip("\n") == ANSWER
    assert_stream_matches_extract(parser, text)


def test_muse_glimmer_reads_the_to_self_message_and_drops_the_answer_header() -> None:
    text = continuation("muse-glimmer", "<|eot|>")
    assert text.startswith(" to=self<|message|>")
    parser = get_reasoning_parser("muse_glimmer")
    assert parser.extract(text) == (REASONING, ANSWER)
    assert_stream_matches_extract(parser, text)
    plain = " to=user<|message|>" + ANSWER
    assert parser.extract(plain) == (None, plain)


@pytest.mark.parametrize("thinking", [True, False])
def test_deepseek_v3_reads_reasoning_only_in_thinking_mode(thinking: bool) -> None:
    prompt = render(
        load_template("deepseek-ai-DeepSeek-V3.1"),
        USER,
        add_generation_prompt=True,
        thinking=thinking,
    )
    assert prompt.endswith("<think>" if thinking else "</think>")
    parser = get_reasoning_parser("deepseek_v3")
    text = f"{REASONING}</think>{ANSWER}" if thinking else ANSWER
    expected = (REASONING, ANSWER) if thinking else (None, ANSWER)
    assert parser.extract(text, prompt=prompt) == expected
    assert_stream_matches_extract(parser, text, prompt=prompt)
    assert parser.extract(f"{REASONING}</think>{ANSWER}", enable_thinking=True) == (
        REASONING,
        ANSWER,
    )


@pytest.mark.parametrize("name", ["holo2", "step3", "minimax_m2"])
@pytest.mark.parametrize("opening", ["", "<think>\n"])
def test_reasoning_runs_from_the_start_to_the_closing_tag(name: str, opening: str) -> None:
    parser = get_reasoning_parser(name)
    text = f"{opening}{REASONING}\n</think>\n\n{ANSWER}"
    assert parser.extract(text) == (REASONING, ANSWER)
    assert parser.extract(REASONING) == (REASONING, None)
    assert_stream_matches_extract(parser, text)


def test_olmo3_follows_the_prompt_or_the_closing_tag() -> None:
    parser = get_reasoning_parser("olmo3")
    text = f"{REASONING}</think>{ANSWER}"
    assert parser.extract(text, prompt="<|im_start|>assistant\n<think>") == (REASONING, ANSWER)
    assert parser.extract(text) == (REASONING, ANSWER)
    assert parser.extract(ANSWER) == (None, ANSWER)
    assert parser.extract(f"<think>{REASONING}</think>{ANSWER}") == (REASONING, ANSWER)
    assert_stream_matches_extract(parser, text)


AUTO = {
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",
    "muse-glimmer": "muse_glimmer",
    "MiniMax-M2": "minimax_m2",
    "Qwen-Qwen3-0.6B": "think_auto",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "think_auto",
    "meta-llama-Llama-3.1-8B-Instruct": "none",
}


@pytest.mark.parametrize("template", sorted(AUTO))
def test_auto_detects_the_templates_reasoning_tags(template: str) -> None:
    text = load_template(template)
    assert detect_reasoning_parser(text) == AUTO[template]
    parser = reasoning_parser_for("auto", text)
    assert (parser.name if parser else "none") == AUTO[template]


def test_auto_names_a_parser_for_every_real_template() -> None:
    for name in template_names():
        assert detect_reasoning_parser(load_template(name)) in reasoning_parser_choices()


def test_auto_and_none_resolve_without_a_parser_object() -> None:
    assert reasoning_parser_for("none", None) is None
    assert reasoning_parser_for(None, "<think>") is None
    with pytest.raises(ValueError, match="chat template"):
        reasoning_parser_for("auto", None)
