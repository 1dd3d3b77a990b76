"""Reasoning parsers split a generation where the real chat templates put the think tags.

The oracle is the chat template: it shows which side writes the opening tag (the generation
prompt ends with it, or the assistant turn starts with it) and how a turn with reasoning
looks. Streaming, in random splits, must rebuild exactly the non-streaming split, with all
reasoning before any content and no piece of a tag leaking into either.
"""

from __future__ import annotations

from typing import Any

import pytest
from parser_streams import SPLITS, Delta, random_pieces, stream
from tool_parser_templates import assistant_turn, load_template, render

from vllm_tvm.server.reasoning_parsers import (
    ReasoningParser,
    get_reasoning_parser,
    reasoning_parser_names,
)
from vllm_tvm.server.tool_parsers import get_tool_parser

REASONING = (
    "The user asks about Paris.\nI should check the weather: a < b, </thinking> isn't a tag."
)
ANSWER = "It is sunny in Paris.\n\nEnjoy your trip!"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
R1_DISTILL = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"
DEEPSEEK_EOS = "<｜end▁of▁sentence｜>"  # noqa: RUF001


def rebuild(deltas: list[Delta]) -> tuple[str | None, str | None]:
    """(reasoning_content, content) from streamed deltas, checking their shape and order."""
    reasoning: list[str] = []
    content: list[str] = []
    for delta in deltas:
        [(field, text)] = delta.items()
        assert text, delta
        if field == "reasoning_content":
            assert not content, "reasoning streamed after content"
            reasoning.append(text)
        else:
            assert field == "content", delta
            content.append(text)
    return ("".join(reasoning) or None), ("".join(content) or None)


def assert_stream_matches_extract(parser: ReasoningParser, text: str, **options: Any) -> None:
    expected = parser.extract(text, **options)
    for seed, longest in SPLITS:
        streamer = parser.streamer(**options)
        deltas = stream(streamer.feed, streamer.finish, random_pieces(text, seed, longest))
        assert rebuild(deltas) == expected, (seed, longest)


def generation_prompt(template: str, **variables: Any) -> str:
    return render(load_template(template), USER, add_generation_prompt=True, **variables)


# ------------------------------------------------------------------------------------ qwen3


def qwen3_turn() -> str:
    """Qwen3's rendering of the final assistant turn with reasoning and an answer."""
    message = {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING}
    return assistant_turn(
        load_template("Qwen-Qwen3-0.6B"),
        [*USER, message],
        header="<|im_start|>assistant\n",
        end="<|im_end|>\n",
    )


def test_qwen3_splits_the_turn_its_template_renders() -> None:
    text = qwen3_turn()
    assert text.startswith("<think>\n")
    assert get_reasoning_parser("qwen3").extract(text) == (REASONING, ANSWER)


def test_qwen3_streaming_rebuilds_the_split() -> None:
    assert_stream_matches_extract(get_reasoning_parser("qwen3"), qwen3_turn())


def test_qwen3_with_thinking_disabled_has_no_reasoning() -> None:
    prompt = generation_prompt("Qwen-Qwen3-0.6B", enable_thinking=False)
    assert prompt.endswith("<think>\n\n</think>\n\n")
    parser = get_reasoning_parser("qwen3")
    assert parser.extract(ANSWER, enable_thinking=False) == (None, ANSWER)
    assert parser.extract(qwen3_turn(), enable_thinking=False) == (None, qwen3_turn())
    assert_stream_matches_extract(parser, qwen3_turn(), enable_thinking=False)


def test_qwen3_output_that_does_not_open_think_is_all_content() -> None:
    text = "Sure. Closing a tag it never opened: </think> stays content."
    assert get_reasoning_parser("qwen3").extract(text) == (None, text)
    assert_stream_matches_extract(get_reasoning_parser("qwen3"), text)


def test_qwen3_empty_thinking_block_gives_no_reasoning() -> None:
    text = "<think>\n\n</think>\n\nHello"
    assert get_reasoning_parser("qwen3").extract(text) == (None, "Hello")


# ------------------------------------------------------------------------------ deepseek_r1


def test_deepseek_r1_template_opens_the_think_tag_in_the_prompt() -> None:
    assert generation_prompt(R1_DISTILL, enable_thinking=True).endswith("<think>\n")


@pytest.mark.parametrize("opening", ["", "<think>\n"])
def test_deepseek_r1_reads_reasoning_with_or_without_the_opening_tag(opening: str) -> None:
    text = f"{opening}{REASONING}\n</think>\n\n{ANSWER}"
    parser = get_reasoning_parser("deepseek_r1")
    assert parser.extract(text) == (REASONING, ANSWER)
    assert_stream_matches_extract(parser, text)


def test_deepseek_r1_generation_cut_before_the_closing_tag_is_all_reasoning() -> None:
    text = f"{REASONING}\nand then the generation hit max_tokens </thi"
    parser = get_reasoning_parser("deepseek_r1")
    assert parser.extract(text) == (text.strip(), None)
    assert_stream_matches_extract(parser, text)


def test_deepseek_r1_with_thinking_disabled_has_no_reasoning() -> None:
    prompt = generation_prompt(R1_DISTILL, enable_thinking=False)
    assert prompt.endswith("<think>\n</think>")
    assert get_reasoning_parser("deepseek_r1").extract(ANSWER, enable_thinking=False) == (
        None,
        ANSWER,
    )


def test_deepseek_r1_answer_matches_what_its_template_keeps_in_history() -> None:
    # The template drops the reasoning of past turns by splitting at </think>.
    generated = f"{REASONING}\n</think>\n\n{ANSWER}"
    message = {"role": "assistant", "content": generated}
    kept = assistant_turn(
        load_template(R1_DISTILL),
        [*USER, message],
        header="<｜Assistant｜>",  # noqa: RUF001
        end=DEEPSEEK_EOS,
    )
    assert get_reasoning_parser("deepseek_r1").extract(generated)[1] == kept.lstrip()


# ------------------------------------------------------------------------------- think_auto


@pytest.mark.parametrize(
    ("template", "variables"),
    [
        (R1_DISTILL, {"enable_thinking": True}),
        ("Qwen-QwQ-32B", {"enable_thinking": True}),
        ("deepseek-ai-DeepSeek-V3.1", {"thinking": True}),
        ("Reka-Edge", {"enable_thinking": True}),
    ],
)
def test_think_auto_reads_reasoning_opened_by_the_prompt(template: str, variables: dict) -> None:
    prompt = generation_prompt(template, **variables)
    assert prompt.rstrip().endswith("<think>")
    text = f"{REASONING}\n</think>\n\n{ANSWER}"
    parser = get_reasoning_parser("think_auto")
    assert parser.extract(text, prompt=prompt) == (REASONING, ANSWER)
    assert_stream_matches_extract(parser, text, prompt=prompt)


@pytest.mark.parametrize(
    ("template", "variables"),
    [("Qwen-Qwen3-0.6B", {}), ("deepseek-ai-DeepSeek-V3.1", {"thinking": False})],
)
def test_think_auto_without_an_opened_prompt_needs_the_model_to_open(
    template: str, variables: dict
) -> None:
    prompt = generation_prompt(template, **variables)
    parser = get_reasoning_parser("think_auto")
    assert parser.extract(qwen3_turn(), prompt=prompt) == (REASONING, ANSWER)
    assert parser.extract(ANSWER, prompt=prompt) == (None, ANSWER)
    plain = f"An answer mentioning </think> in passing. {ANSWER}"
    assert parser.extract(plain, prompt=prompt) == (None, plain)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"<think>\n{REASONING}\n</think>\n\n{ANSWER}", (REASONING, ANSWER)),
        (f"{REASONING}\n</think>\n\n{ANSWER}", (REASONING, ANSWER)),
        (ANSWER, (None, ANSWER)),
        (f"\n{ANSWER}  ", (None, f"\n{ANSWER}  ")),
    ],
)
def test_think_auto_without_a_prompt_follows_the_tags_in_the_output(
    text: str, expected: tuple[str | None, str | None]
) -> None:
    parser = get_reasoning_parser("think_auto")
    assert parser.extract(text) == expected
    assert_stream_matches_extract(parser, text)


# ---------------------------------------------------------------------------------- mistral


def ministral_turn(tool_calls: list[dict] | None = None) -> str:
    """Ministral 3 Reasoning's rendering of an assistant turn with thinking and text."""
    message: dict = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": REASONING},
            {"type": "text", "text": ANSWER},
        ],
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    return assistant_turn(
        load_template("mistralai-Ministral-3-14B-Reasoning-2512"),
        [*USER, message],
        header="[/INST]",
        end="</s>",
        bos_token="<s>",
        eos_token="</s>",
    )


def test_mistral_splits_the_turn_its_template_renders() -> None:
    text = ministral_turn()
    assert text.startswith("[THINK]")
    assert get_reasoning_parser("mistral").extract(text) == (REASONING, ANSWER)
    assert_stream_matches_extract(get_reasoning_parser("mistral"), text)


def test_mistral_reasoning_then_tool_calls_read_in_sequence() -> None:
    call = {"id": "abcDEF123", "type": "function"}
    call["function"] = {"name": "get_weather", "arguments": {"city": "Paris"}}
    text = ministral_turn([call])
    reasoning, content = get_reasoning_parser("mistral").extract(text)
    assert reasoning == REASONING
    answer, [parsed] = get_tool_parser("mistral").extract(content or "")
    assert (answer, parsed.name, parsed.arguments) == (ANSWER, "get_weather", '{"city": "Paris"}')


def test_mistral_output_without_think_is_all_content() -> None:
    assert get_reasoning_parser("mistral").extract(ANSWER) == (None, ANSWER)


# ------------------------------------------------------------------------------------- all


@pytest.mark.parametrize("name", reasoning_parser_names())
@pytest.mark.parametrize("text", ["", "   \n", "<", "<think", "[THINK"])
def test_degenerate_outputs_never_raise_and_stream_alike(name: str, text: str) -> None:
    assert_stream_matches_extract(get_reasoning_parser(name), text)


@pytest.mark.parametrize("name", reasoning_parser_names())
def test_thinking_disabled_makes_everything_content(name: str) -> None:
    text = f"<think>{REASONING}</think>[THINK]x[/THINK]{ANSWER}"
    parser = get_reasoning_parser(name)
    assert parser.extract(text, enable_thinking=False) == (None, text)
    assert_stream_matches_extract(parser, text, enable_thinking=False)


def test_reasoning_parser_names_are_the_supported_ones() -> None:
    assert reasoning_parser_names() == [
        "deepseek_r1",
        "deepseek_v3",
        "holo2",
        "minimax_m2",
        "minimax_m2_append_think",
        "mistral",
        "muse_glimmer",
        "olmo3",
        "qwen3",
        "step3",
        "think_auto",
    ]


def test_unknown_reasoning_parser_is_rejected_with_the_accepted_names() -> None:
    with pytest.raises(ValueError) as error:
        get_reasoning_parser("deepseek")
    message = str(error.value)
    assert "'deepseek'" in message
    assert all(name in message for name in reasoning_parser_names())
