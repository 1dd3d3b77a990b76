"""POST /v1/chat/completions: messages rendered by the chat template, generated, and the
text split into reasoning, content and tool calls; one JSON body or server-sent events.

Why a module: the chat route's own rules live here. Tools reach the template; with
tool_choice `auto` (the default when tools are given) the server's tool-call parser reads
the output, `required` and a named function constrain the output to the calls' JSON
instead, `none` leaves the text alone. When a parser reads the output, special tokens are
kept in the text by default, since some dialects' markers are special tokens.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from http import HTTPStatus
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from vllm_tvm.runtime.tokenization.chat_messages import template_content
from vllm_tvm.server.chat_output import (
    ChoiceOutputParser,
    ToolChoice,
    forced_tool_calls,
    forced_tool_constraint,
)
from vllm_tvm.server.completions import usage
from vllm_tvm.server.errors import APIError
from vllm_tvm.server.generation import ChoiceDelta, ChoiceState, Generation, Prompt, PromptState
from vllm_tvm.server.logprobs import chat_logprobs, prompt_logprobs_json
from vllm_tvm.server.protocol import ChatCompletionRequest, NamedToolChoice
from vllm_tvm.server.sampling import check_fits_context, sampling_params, structured_outputs
from vllm_tvm.server.serving import ServingContext, off_loop
from vllm_tvm.server.sse import DONE, EventStreamResponse, sse, sse_error, sse_generation_failed

ROLE = "assistant"


class ChatCall:
    """One chat request after its prompt and parameters are settled."""

    def __init__(self, ctx: ServingContext, request: ChatCompletionRequest) -> None:
        ctx.check_model(request.model)
        if request.top_logprobs is not None and not request.logprobs:
            raise APIError("top_logprobs needs logprobs set to true", param="top_logprobs")
        self.ctx = ctx
        self.request = request
        self.request_id = ctx.new_id("chatcmpl")
        self.created = int(time.time())
        self.tool_choice: ToolChoice = request.tool_choice or ("auto" if request.tools else "none")
        kwargs = ctx.template_kwargs(request.chat_template_kwargs)
        self.enable_thinking: bool | None = kwargs.get("enable_thinking")
        self.prompt_text = ctx.render_chat(
            request.messages,
            tools=request.tools,
            add_generation_prompt=request.add_generation_prompt,
            continue_final_message=request.continue_final_message,
            chat_template=request.chat_template,
            template_kwargs=kwargs,
            documents=request.documents,
        )
        images = ctx.chat_images(request.messages)
        self.prompt = Prompt(
            ctx.encode_chat(self.prompt_text, images, request.add_special_tokens), None, images
        )
        constraint = structured_outputs(request)
        forced = forced_tool_constraint(self.tool_choice, request.tools)
        if forced is not None and constraint is not None:
            raise APIError(
                "tool_choice 'required' or a named function cannot be combined with "
                "response_format or structured_outputs",
                param="tool_choice",
            )
        self.constraint = ctx.with_server_defaults(forced or constraint)
        self.forced = forced is not None
        self.auto_tools = (
            self.tool_choice == "auto" and bool(request.tools) and ctx.tool_parser.name != "none"
        )
        parsing = self.auto_tools or ctx.reasoning_parser is not None
        keep_specials = parsing and "skip_special_tokens" not in request.model_fields_set
        budget = (
            request.max_completion_tokens
            if request.max_completion_tokens is not None
            else request.max_tokens
        )
        check_fits_context(budget, [len(self.prompt.token_ids)], ctx.max_model_len)
        self.top_logprobs = request.top_logprobs or 0
        self.params = sampling_params(
            request,
            defaults=ctx.sampling_defaults,
            max_tokens=budget,
            logprobs=self.top_logprobs if request.logprobs else None,
            prompt_logprobs=request.prompt_logprobs,
            ceiling=ctx.config.max_new_tokens,
            skip_special_tokens=False if keep_specials else None,
        )
        self.tools = (
            [tool.model_dump(exclude_none=True) for tool in request.tools]
            if request.tools
            else None
        )
        self.echo = self._echo_text()

    def _echo_text(self) -> str:
        """With `echo`, the final assistant message's text the reply continues."""
        last = self.request.messages[-1] if self.request.messages else None
        if not self.request.echo or last is None or last.role != ROLE:
            return ""
        return template_content(len(self.request.messages) - 1, last.content)

    def output_parser(self) -> ChoiceOutputParser:
        """A parser for one choice's text."""
        return ChoiceOutputParser(
            self.ctx.reasoning_parser,
            self.ctx.tool_parser if self.auto_tools else None,
            self.tools,
            self.prompt_text,
            self.enable_thinking,
        )

    def finish_reason(self, choice: ChoiceState, called_tools: bool) -> str | None:
        """`tool_calls` when a parser or `required` produced calls at a normal stop."""
        named = isinstance(self.tool_choice, NamedToolChoice)
        if called_tools and not named and choice.finish_reason == "stop":
            return "tool_calls"
        return choice.finish_reason

    def logprobs(self, entries: list[Any] | None) -> dict[str, Any] | None:
        """The chat logprobs object of some tokens (None unless asked for)."""
        if not self.request.logprobs:
            return None
        return chat_logprobs(entries or [], self.top_logprobs, self.ctx.token_text)

    def message(self, choice: ChoiceState) -> tuple[dict[str, Any], bool]:
        """The assistant message of a finished choice, and whether it called tools."""
        parsed = self.output_parser().parse(choice.text)
        calls = parsed.tool_calls
        content = parsed.content
        if self.forced:
            forced = forced_tool_calls(self.tool_choice, choice.text)
            if forced is not None:
                calls, content = forced, None
        if content is not None and self.echo:
            content = self.echo + content
        message = {
            "role": ROLE,
            "content": content,
            "reasoning_content": parsed.reasoning_content,
            "tool_calls": [call.to_openai() for call in calls],
        }
        return message, bool(calls)

    def response(self, states: list[PromptState]) -> dict[str, Any]:
        """The whole JSON response."""
        [state] = states
        choices = []
        for choice in state.choices:
            message, called = self.message(choice)
            choices.append(
                {
                    "index": choice.index,
                    "message": message,
                    "logprobs": self.logprobs(choice.logprobs),
                    "finish_reason": self.finish_reason(choice, called),
                    "stop_reason": choice.stop_reason,
                }
            )
        body: dict[str, Any] = {
            "id": self.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.ctx.model_name,
            "choices": choices,
            "usage": usage(states),
        }
        if self.request.prompt_logprobs is not None:
            body["prompt_logprobs"] = prompt_logprobs_json(
                state.prompt_logprobs, self.ctx.token_text
            )
        return body

    def chunk(self, index: int, delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """One stream event for choice `index`."""
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        choice.update(extra)
        return {
            "id": self.request_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.ctx.model_name,
            "choices": [choice],
        }


async def create_chat_completion(
    ctx: ServingContext, request: ChatCompletionRequest, raw_request: Request
) -> Response:
    """Handle POST /v1/chat/completions (the prompt rendered and tokenized off the loop)."""
    call = await off_loop(ChatCall, ctx, request)
    generation = await Generation.start(
        ctx.engine,
        ctx.constraints,
        call.request_id,
        [call.prompt],
        call.params,
        call.constraint,
        request.priority,
        ctx.config.max_logprobs,
    )
    ctx.log_request(call.request_id, call.prompt_text, call.params)
    if request.stream:
        return EventStreamResponse(_stream(call, generation), ctx.config.sse_ping_seconds)
    states = await ctx.run_to_end(generation, raw_request.receive)
    if states is None:
        return Response(status_code=int(HTTPStatus.NO_CONTENT))
    return JSONResponse(call.response(states))


class _ChoiceStream:
    """Stream state of one choice: its parser, or for a forced tool choice its call."""

    def __init__(self, call: ChatCall) -> None:
        self.call = call
        self.parser = call.output_parser()
        self.named_started = False
        self.called = False

    def feed(self, text: str) -> list[dict[str, Any]]:
        if not self.call.forced:
            return self.parser.feed(text)
        tool_choice = self.call.tool_choice
        if not isinstance(tool_choice, NamedToolChoice):
            return []  # `required`: the array is read whole at the end
        deltas = []
        if not self.named_started:
            self.named_started = self.called = True
            [header] = forced_tool_calls(tool_choice, "") or []
            entry = header.to_openai()
            deltas.append({"tool_calls": [{"index": 0, **entry}]})
        if text:
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": text}}]})
        return deltas

    def finish(self, choice: ChoiceState) -> list[dict[str, Any]]:
        if not self.call.forced:
            deltas = self.parser.finish()
            self.called = self.parser.called_tools
            return deltas
        if isinstance(self.call.tool_choice, NamedToolChoice):
            return self.feed("") if not self.named_started else []
        calls = forced_tool_calls(self.call.tool_choice, choice.text)
        if calls is None:
            return [{"content": choice.text}] if choice.text else []
        self.called = True
        return [
            {"tool_calls": [{"index": i, **tool_call.to_openai()}]}
            for i, tool_call in enumerate(calls)
        ]


async def _stream(call: ChatCall, generation: Generation) -> AsyncGenerator[str, None]:
    options = call.request.stream_options
    include_usage = call.ctx.config.enable_force_include_usage or bool(
        options and options.include_usage
    )
    continuous = bool(options and options.continuous_usage_stats)
    streams: dict[int, _ChoiceStream] = {}

    def event(chunk: dict[str, Any]) -> str:
        if continuous:
            chunk["usage"] = usage(generation.states)
        return sse(chunk)

    try:
        async for delta in generation.deltas():
            for chunk in _delta_chunks(call, streams, delta):
                yield event(chunk)
            if delta.finished and delta.choice.finish_reason == "error":
                state = generation.states[delta.prompt_index]
                error = state.error or "unknown error"
                yield sse_generation_failed(error)
        if include_usage:
            final = call.chunk(0, {})
            final["choices"] = []
            final["usage"] = usage(generation.states)
            yield sse(final)
        call.ctx.log_outputs(generation)
    except Exception as err:  # the engine died under the stream: say so in-band
        yield sse_error(f"generation failed: {err}", HTTPStatus.INTERNAL_SERVER_ERROR)
    finally:
        await generation.aclose()
    yield DONE


def _delta_chunks(
    call: ChatCall, streams: dict[int, _ChoiceStream], delta: ChoiceDelta
) -> list[dict[str, Any]]:
    """The events of one engine delta of one choice."""
    index = delta.choice.index
    chunks = []
    if delta.first:
        streams[index] = _ChoiceStream(call)
        chunks.append(call.chunk(index, {"role": ROLE, "content": call.echo}))
    stream = streams[index]
    pieces = stream.feed(delta.text)
    if delta.finished:
        pieces += stream.finish(delta.choice)
    logprobs = call.logprobs(delta.logprobs) if delta.logprobs else None
    for piece in pieces:
        chunks.append(call.chunk(index, piece, logprobs=logprobs))
        logprobs = None
    if logprobs is not None:
        chunks.append(call.chunk(index, {}, logprobs=logprobs))
    if delta.finished:
        reason = call.finish_reason(delta.choice, stream.called)
        chunks.append(
            call.chunk(index, {}, finish_reason=reason, stop_reason=delta.choice.stop_reason)
        )
    return chunks
