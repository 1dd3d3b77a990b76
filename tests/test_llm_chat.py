"""`LLM.chat`, shaped like vLLM's: one conversation or a list of them, each rendered by a chat
template (the assistant turn opened unless add_generation_prompt=False), one output each.

Oracle: ChatML written out by hand (the expected prompt text), encoded without special
tokens, and `LLM.generate` on those ids (the same greedy completion).
"""

from __future__ import annotations

from server_helpers import CHATML

from vllm_tvm.runtime.sampling.params import SamplingParams

GREEDY = SamplingParams(max_tokens=3, temperature=0.0)
HELLO = [{"role": "user", "content": "hello"}]
FOX = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "the quick brown fox"},
]


def chatml_text(conversation: list[dict[str, str]], open_assistant: bool = True) -> str:
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in conversation)
    return turns + ("<|im_start|>assistant\n" if open_assistant else "")


def test_one_conversation_is_rendered_and_completed(make_llm) -> None:
    llm = make_llm()
    [output] = llm.chat(HELLO, GREEDY, chat_template=CHATML)
    expected_ids = llm.tokenizer.encode(chatml_text(HELLO), add_special_tokens=False)
    assert output.prompt_token_ids == expected_ids
    [direct] = llm.generate(expected_ids, GREEDY)
    assert output.outputs[0].token_ids == direct.outputs[0].token_ids


def test_a_list_of_conversations_gives_one_output_each_in_order(make_llm) -> None:
    llm = make_llm()
    outputs = llm.chat([HELLO, FOX], GREEDY, chat_template=CHATML)
    assert [o.prompt_token_ids for o in outputs] == [
        llm.tokenizer.encode(chatml_text(c), add_special_tokens=False) for c in (HELLO, FOX)
    ]


def test_add_generation_prompt_false_leaves_the_assistant_turn_closed(make_llm) -> None:
    llm = make_llm()
    [output] = llm.chat(HELLO, GREEDY, chat_template=CHATML, add_generation_prompt=False)
    expected = llm.tokenizer.encode(chatml_text(HELLO, False), add_special_tokens=False)
    assert output.prompt_token_ids == expected


def test_a_tool_call_turn_with_null_or_no_content_renders_as_empty_content(make_llm) -> None:
    """An agent loop's replayed tool call: content null, or no content key (vLLM renders
    both empty), through a template that concatenates content as SmolLM2's does."""
    strict = CHATML.replace("(message['content'] or '')", "message['content']")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    conversation = [
        *HELLO,
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    llm = make_llm()
    ids = llm.chat_prompt_ids(conversation, chat_template=strict, add_generation_prompt=False)
    expected = chatml_text(
        [
            *HELLO,
            {"role": "assistant", "content": ""},
            {"role": "tool", "content": "ok"},
            {"role": "assistant", "content": ""},
        ],
        open_assistant=False,
    )
    assert ids == llm.tokenizer.encode(expected, add_special_tokens=False)
