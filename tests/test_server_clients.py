"""Real client libraries in their default modes against the server on the default model
(SmolLM2-135M-Instruct, Q4_1 GGUF) on loopback: instructor returns validated pydantic
objects (TOOLS, its default, and JSON_SCHEMA) and LangChain's ChatOpenAI invokes, streams
and gives structured output by its default method.

instructor's plain JSON mode (`response_format` json_object, the schema only in a system
prompt) leaves the schema to the model, and this 135M model answers it by echoing the
schema: that is the model, not the server (json_object admits any object, as in vLLM).
"""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field
from server_helpers import MODEL_NAME, start_farm

from vllm_tvm.checkpoints.default_model import DefaultModelMissingError, default_model_path

instructor = pytest.importorskip("instructor")
langchain_openai = pytest.importorskip("langchain_openai")

QUESTION = "Paris is the capital of France. Extract the city."


class City(BaseModel):
    name: str = Field(max_length=16)
    country: Literal["France", "Japan", "Peru"]
    capital: bool


@pytest.fixture(scope="module")
def server():
    try:
        model = default_model_path()
    except DefaultModelMissingError as missing:
        pytest.skip(str(missing))
    farm = start_farm(model, max_model_len=1024)
    yield farm.server()
    farm.stop()


def _instructor(server, **mode):
    return instructor.from_openai(server.client(), **mode)


def test_instructor_default_tools_mode_returns_a_validated_object(server) -> None:
    assert instructor.from_openai(server.client()).mode == instructor.Mode.TOOLS
    city = _instructor(server).chat.completions.create(
        model=MODEL_NAME,
        response_model=City,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=80,
        max_retries=0,
    )
    assert isinstance(city, City)


def test_instructor_json_schema_mode_returns_a_validated_object(server) -> None:
    client = _instructor(server, mode=instructor.Mode.JSON_SCHEMA)
    city = client.chat.completions.create(
        model=MODEL_NAME,
        response_model=City,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=80,
        max_retries=0,
    )
    assert isinstance(city, City)


def _chat(server, max_tokens: int):
    return langchain_openai.ChatOpenAI(
        model=MODEL_NAME,
        base_url=server.url + "/v1",
        api_key="unused",
        max_tokens=max_tokens,
        temperature=0,
    )


def test_langchain_invoke_and_stream_give_the_same_greedy_text(server) -> None:
    chat = _chat(server, max_tokens=12)
    invoked = chat.invoke("Say hi")
    streamed = "".join(chunk.content for chunk in chat.stream("Say hi"))
    assert invoked.content and streamed == invoked.content
    assert invoked.response_metadata["finish_reason"] in ("stop", "length")


def test_langchain_structured_output_default_method_returns_a_validated_object(server) -> None:
    city = _chat(server, max_tokens=80).with_structured_output(City).invoke(QUESTION)
    assert isinstance(city, City)
