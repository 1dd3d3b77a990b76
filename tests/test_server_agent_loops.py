"""Agent loops against a live server: the turn after a tool call, with the real clients that
send it, and every content shape the OpenAI API allows reaching the chat template.

Specification (vLLM's): an assistant message that called tools may carry `content: null`
(LangChain always sends it so) or no `content` key at all (the openai SDK's
`model_dump(exclude_none=True)`); either renders as empty content. Content may also be a list
of text or refusal parts, joined by newlines. A part the text-only server cannot show the
model is a 400 naming it.

The server here renders with a template that concatenates `message['content']`, as
SmolLM2's (the default model's) does, so a null or missing content cannot hide behind a
template's own `or ''`. The tiny random model is made to say each turn's text with a
`structured_outputs` choice; the tool call is in the hermes format the default
`--tool-call-parser` reads.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx2 as httpx
import openai
import pytest
from pydantic import BaseModel, field_validator
from server_helpers import MODEL_NAME

STRICT_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""SmolLM2's way of rendering a message: its content concatenated, never defaulted."""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "It is sunny in Paris."
QUESTION = "What is the weather in Paris?"


def say(text: str) -> dict[str, Any]:
    """Request fields that make the model generate exactly `text`."""
    return {"structured_outputs": {"choice": [text]}}


@pytest.fixture(scope="module")
def agent_server(server_farm):
    return server_farm.server(chat_template=STRICT_CHATML)


def rendered(server, messages: list[dict[str, Any]]) -> str:
    """The prompt text the server's template makes of `messages` (/tokenize, /detokenize)."""
    body = {"messages": messages, "add_generation_prompt": False}
    response = httpx.post(server.url + "/tokenize", json=body)
    assert response.status_code == 200, response.text
    back = httpx.post(server.url + "/detokenize", json={"tokens": response.json()["tokens"]})
    return back.json()["prompt"]


def test_langchain_agent_calls_the_tool_then_answers(agent_server) -> None:
    agents = pytest.importorskip("langchain.agents")
    middleware = pytest.importorskip("langchain.agents.middleware")
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    calls: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return "sunny"

    @middleware.wrap_model_call
    def scripted_turns(request, handler):
        """Turn 1 says the tool call, every later turn the answer."""
        done = any(isinstance(message, ToolMessage) for message in request.messages)
        text = ANSWER if done else CALL_TEXT
        settings = {**request.model_settings, "extra_body": say(text)}
        return handler(request.override(model_settings=settings))

    model = ChatOpenAI(
        model=MODEL_NAME,
        base_url=agent_server.url + "/v1",
        api_key="unused",
        temperature=0,
        max_tokens=64,
        max_retries=0,
    )
    agent = agents.create_agent(model, tools=[get_weather], middleware=[scripted_turns])
    result = agent.invoke({"messages": [{"role": "user", "content": QUESTION}]})
    messages = result["messages"]
    assert calls == ["Paris"]
    assert [type(message).__name__ for message in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert messages[1].tool_calls[0]["args"] == {"city": "Paris"}
    assert isinstance(messages[-1], AIMessage) and messages[-1].content == ANSWER


def _first_turn(client: openai.OpenAI) -> Any:
    result = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[WEATHER_TOOL],
        extra_body=say(CALL_TEXT),
    )
    assert result.choices[0].finish_reason == "tool_calls"
    return result.choices[0].message


@pytest.mark.parametrize("content", ["absent", None], ids=["absent", "null"])
def test_openai_sdk_replays_its_tool_call_message(agent_server, content) -> None:
    client = agent_server.client()
    message = _first_turn(client)
    replayed = message.model_dump(exclude_none=True)
    assert "content" not in replayed  # what the SDK's own dump gives
    if content is None:
        replayed["content"] = None
    [call] = message.tool_calls
    messages = [
        {"role": "user", "content": QUESTION},
        replayed,
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    result = client.chat.completions.create(
        model=MODEL_NAME, messages=messages, tools=[WEATHER_TOOL], extra_body=say(ANSWER)
    )
    assert result.choices[0].message.content == ANSWER
    assert rendered(agent_server, messages) == (
        f"<|im_start|>user\n{QUESTION}<|im_end|>\n"
        "<|im_start|>assistant\n<|im_end|>\n"
        "<|im_start|>tool\nsunny<|im_end|>\n"
    )


class Weather(BaseModel):
    city: Literal["Paris", "Tokyo"]

    @field_validator("city")
    @classmethod
    def _refuse_the_first_answer(cls, city: str) -> str:
        ATTEMPTS.append(city)
        if len(ATTEMPTS) == 1:
            raise ValueError("try once more")
        return city


ATTEMPTS: list[str] = []


def test_instructor_default_mode_reasks_after_its_tool_call(agent_server) -> None:
    instructor = pytest.importorskip("instructor")
    ATTEMPTS.clear()
    client = instructor.from_openai(agent_server.client())
    weather = client.chat.completions.create(
        model=MODEL_NAME,
        response_model=Weather,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=40,
        temperature=0,
        max_retries=1,
    )
    assert len(ATTEMPTS) == 2  # the reask: assistant tool call and its error as turn two
    assert isinstance(weather, Weather)


CONTENT_SHAPES = {
    "string": ("hi there", "hi there"),
    "null": (None, ""),
    "text parts": (
        [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}],
        "hi\nthere",
    ),
    "refusal part": ([{"type": "refusal", "refusal": "I can't."}], "I can't."),
}


@pytest.mark.parametrize("shape", CONTENT_SHAPES, ids=list(CONTENT_SHAPES))
def test_every_content_shape_reaches_the_template_as_text(agent_server, shape) -> None:
    content, text = CONTENT_SHAPES[shape]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "assistant", "content": content, "tool_calls": None, "name": None},
    ]
    assert rendered(agent_server, messages) == (
        f"<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n{text}<|im_end|>\n"
    )


def test_a_null_tool_calls_key_is_left_out(server_farm) -> None:
    server = server_farm.server(chat_template="{{ messages[0].keys() | sort | join(',') }}")
    messages = [{"role": "assistant", "content": None, "tool_calls": None, "name": None}]
    assert rendered(server, messages) == "content,role"


def test_an_image_part_is_a_400_naming_it(agent_server) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with pytest.raises(openai.BadRequestError) as caught:
        agent_server.client().chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": [image]}], max_tokens=1
        )
    assert "messages[0]: unsupported content part 'image_url'" in caught.value.body["message"]
