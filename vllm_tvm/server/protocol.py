"""Request bodies of the OpenAI-compatible server, with OpenAI's and vLLM's field names.

Why it exists: FastAPI validates every body against these models (a type error is a 400
before any handler runs) and publishes them as the app's OpenAPI schema, which is what the
fuzz tests generate requests from. Only shapes and types live here; value rules (ranges,
vocabulary, lengths) belong to `SamplingParams` and the engine, which name the bad value.

Unknown fields are accepted and ignored, as vLLM does: OpenAI clients send fields a local
server has no use for (`store`, `metadata`, ...). Two rules span the whole body and so live
here too: no text anywhere in it may hold a lone UTF-16 surrogate (`"\\ud800"`, or the raw
bytes ED A0 80, which JSON decoding turns into one), since no tokenizer can read it and no
response could echo it; and `stream` is a strict boolean that `stream_options` needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator
from pydantic_core import PydanticCustomError

MAX_N = 128
"""The most completions one request may ask for (OpenAI's limit)."""

MAX_LOGIT_BIAS_KEYS = 300_000
"""More `logit_bias` entries than any served vocabulary has ids (the largest, Gemma's, has
262,144): such a map holds duplicates or out-of-vocabulary ids for every model, so it is
refused by its size alone, before any entry is converted (a million entries cost seconds).
Maps under it are checked against the model's vocabulary, in one pass over their keys."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


def lone_surrogates(value: object, where: str = "body") -> Iterator[str]:
    """Where (`messages[0].content`, a key of `logit_bias`, ...) each string inside `value`
    (nested dicts, lists and strings, as JSON decodes them) holds a lone surrogate."""
    if isinstance(value, str):
        if _has_lone_surrogate(value):
            yield where
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _has_lone_surrogate(key):
                yield f"a key of {where}"
            else:
                yield from lone_surrogates(item, key if where == "body" else f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from lone_surrogates(item, f"{where}[{index}]")


def _has_lone_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class _Request(_Body):
    """A whole request body: its text must be valid Unicode (see the module docstring)."""

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        bad = next(lone_surrogates(data), None)
        if bad is not None:
            raise PydanticCustomError(
                "invalid_unicode",
                "{field}: text holds a lone UTF-16 surrogate (e.g. \\ud800), which is not "
                "valid Unicode",
                {"field": bad},
            )
        return data


class StreamOptions(_Body):
    """`stream_options`: a usage chunk at the end, or usage on every chunk."""

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class ResponseFormatJsonSchema(_Body):
    """`response_format.json_schema`."""

    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    """OpenAI `response_format`: text, json_object or json_schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: ResponseFormatJsonSchema | None = None


class SamplingFields(_Request):
    """Fields both generation routes share (OpenAI's, then vLLM's extensions)."""

    @model_validator(mode="before")
    @classmethod
    def _bounded_logit_bias(cls, data: Any) -> Any:
        bias = data.get("logit_bias") if isinstance(data, dict) else None
        if isinstance(bias, dict) and len(bias) > MAX_LOGIT_BIAS_KEYS:
            raise PydanticCustomError(
                "too_many_logit_bias_keys",
                "{field}: {count} entries, more than the {limit} any vocabulary allows",
                {"field": "logit_bias", "count": len(bias), "limit": MAX_LOGIT_BIAS_KEYS},
            )
        return data

    model: str | None = None
    frequency_penalty: float | None = 0.0
    presence_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    n: int = Field(default=1, le=MAX_N)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    response_format: ResponseFormat | None = None
    # vLLM extensions
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    stop_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    allowed_token_ids: list[int] | None = None
    prompt_logprobs: int | None = None
    priority: int = 0
    structured_outputs: dict[str, Any] | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise PydanticCustomError(
                "stream_options_without_stream",
                "{field}: only allowed when stream is true",
                {"field": "stream_options"},
            )
        return self


class CompletionRequest(SamplingFields):
    """POST /v1/completions. `prompt` is a string, a list of strings, a list of token ids or
    a list of token-id lists; `max_tokens` of 0 with `echo` scores the prompt (returns it,
    and its logprobs, with no generated token); otherwise a non-positive one is unset."""

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = 16
    best_of: int | None = None
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None
    add_special_tokens: bool = True


class FunctionDefinition(_Body):
    """A tool's function: name, description and JSON-schema parameters."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    """One entry of `tools`."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Body):
    """The function a named `tool_choice` forces."""

    name: str


class NamedToolChoice(_Body):
    """`tool_choice: {"type": "function", "function": {"name": ...}}`."""

    type: Literal["function"] = "function"
    function: NamedFunction


class ChatMessage(_Body):
    """One message; `content` is text, a list of content parts, or null (tool calls)."""

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class ChatCompletionRequest(SamplingFields):
    """POST /v1/chat/completions. `max_completion_tokens` takes precedence over the older
    `max_tokens`; unset (or non-positive) means up to the length limit."""

    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = True
    # vLLM extensions
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    documents: list[dict[str, Any]] | None = None


class TokenizeCompletionRequest(_Request):
    """POST /tokenize with a prompt."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(_Request):
    """POST /tokenize with chat messages (rendered by the chat template first)."""

    model: str | None = None
    messages: list[ChatMessage]
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    return_token_strs: bool | None = False
    tools: list[Tool] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(_Request):
    """POST /detokenize."""

    model: str | None = None
    tokens: list[int]
