"""POST /v1/completions: prompts (text, texts, token ids, lists of token ids) in, OpenAI
`text_completion` objects out, as one JSON body or as server-sent events.

Why a module: the completion route's own rules live here — choice indices run prompt-major
(prompt i's j-th sample is choice i*n+j), `echo` prepends the prompt's text (and, with
`logprobs`, the prompt tokens' logprobs, the first one null), usage counts every prompt once
and every generated token. `echo` with `max_tokens` 0 is how evaluation harnesses (lm-eval)
score a prompt: the answer is the prompt (and its logprobs), with no generated token.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from http import HTTPStatus
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from vllm_tvm.server.errors import APIError
from vllm_tvm.server.generation import ChoiceDelta, ChoiceState, Generation, Prompt, PromptState
from vllm_tvm.server.logprobs import completion_logprobs, prompt_logprobs_json
from vllm_tvm.server.protocol import CompletionRequest
from vllm_tvm.server.sampling import check_fits_context, sampling_params, structured_outputs
from vllm_tvm.server.serving import ServingContext, off_loop
from vllm_tvm.server.sse import DONE, EventStreamResponse, sse, sse_error, sse_generation_failed


def completion_prompts(ctx: ServingContext, request: CompletionRequest) -> list[Prompt]:
    """The request's prompts as token ids (text tokenized, ids kept)."""
    raw = request.prompt
    items: list[str | list[int]]
    if isinstance(raw, str) or (raw and all(isinstance(x, int) for x in raw)):
        items = [raw]  # type: ignore[list-item]
    else:
        items = list(raw)  # type: ignore[arg-type]
    if not items:
        raise APIError("prompt must not be empty", param="prompt")
    prompts = []
    for item in items:
        if isinstance(item, str):
            prompts.append(Prompt(ctx.encode(item, request.add_special_tokens), item))
        else:
            prompts.append(Prompt(list(item)))
    return prompts


def usage(states: list[PromptState]) -> dict[str, int]:
    """OpenAI usage: each prompt once, every generated token."""
    prompt_tokens = sum(len(s.prompt.token_ids) for s in states)
    completion_tokens = sum(len(c.token_ids) for s in states for c in s.choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class CompletionFormatter:
    """Builds the choices of one completion call, whole or as stream deltas."""

    def __init__(self, ctx: ServingContext, request: CompletionRequest, request_id: str) -> None:
        self.ctx = ctx
        self.request = request
        self.request_id = request_id
        self.created = int(time.time())
        self._offsets: dict[int, int] = {}

    def _prompt_text(self, prompt: Prompt) -> str:
        if prompt.text is not None:
            return prompt.text
        return self.ctx.tokenizer.decode(prompt.token_ids, skip_special_tokens=False)

    def _echo(self, state: PromptState) -> tuple[str, dict[str, Any] | None]:
        """The echoed prompt text and, when logprobs were asked, its logprobs."""
        text = self._prompt_text(state.prompt)
        if self.request.logprobs is None:
            return text, None
        entries = list(state.prompt_logprobs or [None] * len(state.prompt.token_ids))
        logprobs = completion_logprobs(
            entries, state.prompt.token_ids, self.request.logprobs, self.ctx.token_text
        )
        return text, logprobs

    def _logprobs(
        self, choice_index: int, token_ids: list[int], entries: list[Any] | None, prefix: Any
    ) -> dict[str, Any] | None:
        if self.request.logprobs is None:
            return None
        offset = self._offsets.get(choice_index, 0)
        if prefix is not None:
            offset += sum(len(t) for t in prefix["tokens"])
        generated = completion_logprobs(
            entries or [], token_ids[: len(entries or [])], self.request.logprobs,
            self.ctx.token_text, text_offset=offset,
        )  # fmt: skip
        if prefix is not None:
            generated = {key: prefix[key] + generated[key] for key in generated}
        return generated

    def choice(self, state: PromptState, choice: ChoiceState) -> dict[str, Any]:
        """One finished choice of the JSON response."""
        text, prefix = self._echo(state) if self.request.echo else ("", None)
        item = {
            "index": choice.index,
            "text": text + choice.text,
            "logprobs": self._logprobs(choice.index, choice.token_ids, choice.logprobs, prefix),
            "finish_reason": choice.finish_reason,
            "stop_reason": choice.stop_reason,
        }
        if self.request.prompt_logprobs is not None:
            item["prompt_logprobs"] = prompt_logprobs_json(
                state.prompt_logprobs, self.ctx.token_text
            )
        return item

    def response(self, states: list[PromptState]) -> dict[str, Any]:
        """The whole JSON response."""
        choices = [self.choice(state, c) for state in states for c in state.choices]
        return {
            "id": self.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.ctx.model_name,
            "choices": sorted(choices, key=lambda c: c["index"]),
            "usage": usage(states),
        }

    def chunk(self, delta: ChoiceDelta, state: PromptState) -> dict[str, Any] | None:
        """The stream event of one delta (None when it carries nothing)."""
        text, prefix = delta.text, None
        if delta.first and self.request.echo:
            echoed, prefix = self._echo(state)
            text = echoed + text
        logprobs = self._logprobs(delta.choice.index, delta.token_ids, delta.logprobs, prefix)
        if logprobs is not None:
            self._offsets[delta.choice.index] = (
                logprobs["text_offset"][-1] + len(logprobs["tokens"][-1])
                if logprobs["tokens"]
                else self._offsets.get(delta.choice.index, 0)
            )
        if not text and not delta.finished and not (logprobs and logprobs["tokens"]):
            return None
        return {
            "id": self.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.ctx.model_name,
            "choices": [
                {
                    "index": delta.choice.index,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": delta.choice.finish_reason if delta.finished else None,
                    "stop_reason": delta.choice.stop_reason if delta.finished else None,
                }
            ],
        }


async def create_completion(
    ctx: ServingContext, request: CompletionRequest, raw_request: Request
) -> Response:
    """Handle POST /v1/completions (text prompts tokenized off the loop)."""
    ctx.check_model(request.model)
    if request.suffix:
        raise APIError("suffix is not supported", param="suffix")
    prompts = await off_loop(completion_prompts, ctx, request)
    wants_echo_logprobs = request.echo and request.logprobs is not None
    score_only = request.echo and request.max_tokens == 0
    if not score_only:
        lengths = [len(prompt.token_ids) for prompt in prompts]
        check_fits_context(request.max_tokens, lengths, ctx.max_model_len)
    params = sampling_params(
        request,
        defaults=ctx.sampling_defaults,
        max_tokens=1 if score_only else request.max_tokens,
        logprobs=request.logprobs,
        ceiling=None if score_only else ctx.config.max_new_tokens,
        prompt_logprobs=(
            request.prompt_logprobs
            if request.prompt_logprobs is not None or not wants_echo_logprobs
            else request.logprobs
        ),
    )
    constraint = ctx.with_server_defaults(structured_outputs(request))
    request_id = ctx.new_id("cmpl")
    generation = await Generation.start(
        ctx.engine,
        ctx.constraints,
        request_id,
        prompts,
        params,
        constraint,
        request.priority,
        ctx.config.max_logprobs,
        score_only,
    )
    for prompt, rid in zip(prompts, generation.request_ids, strict=True):
        ctx.log_request(rid, prompt.text if prompt.text is not None else prompt.token_ids, params)
    formatter = CompletionFormatter(ctx, request, request_id)
    if request.stream:
        return EventStreamResponse(
            _stream(ctx, request, generation, formatter), ctx.config.sse_ping_seconds
        )
    states = await ctx.run_to_end(generation, raw_request.receive)
    if states is None:
        return Response(status_code=int(HTTPStatus.NO_CONTENT))
    return JSONResponse(formatter.response(states))


async def _stream(
    ctx: ServingContext,
    request: CompletionRequest,
    generation: Generation,
    formatter: CompletionFormatter,
) -> AsyncGenerator[str, None]:
    options = request.stream_options
    include_usage = ctx.config.enable_force_include_usage or bool(options and options.include_usage)
    continuous = bool(options and options.continuous_usage_stats)
    try:
        async for delta in generation.deltas():
            state = generation.states[delta.prompt_index]
            if delta.finished and delta.choice.finish_reason == "error":
                error = state.error or "unknown error"
                yield sse_generation_failed(error)
                continue
            chunk = formatter.chunk(delta, state)
            if chunk is None:
                continue
            if continuous:
                chunk["usage"] = usage(generation.states)
            yield sse(chunk)
        if include_usage:
            yield sse(
                {
                    "id": formatter.request_id,
                    "object": "text_completion",
                    "created": formatter.created,
                    "model": ctx.model_name,
                    "choices": [],
                    "usage": usage(generation.states),
                }
            )
        ctx.log_outputs(generation)
    except Exception as err:  # the engine died under the stream: say so in-band
        yield sse_error(f"generation failed: {err}", HTTPStatus.INTERNAL_SERVER_ERROR)
    finally:
        await generation.aclose()
    yield DONE
