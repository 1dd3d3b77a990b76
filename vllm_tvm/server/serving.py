"""What every route handler needs, resolved once at startup: the engine, the tokenizer and
its chat template, the parsers, the structured-output hook, the sampling defaults.

Why it exists: handlers stay about their route's shapes when the shared steps (which model
names are served, turning chat messages into a prompt, tokenizing, logging requests) live in
one object built from the `ServerConfig` and the engine. Rendering and tokenizing take time
in proportion to the request (up to the body limit), so handlers run them off the event
loop (`off_loop`), where they cannot hold up other clients.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.types import Receive

from vllm_tvm.checkpoints.generation_config import generation_defaults_from_checkpoint
from vllm_tvm.runtime.engine.async_engine import AsyncEngine
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.multimodal.image_errors import ImageInputError
from vllm_tvm.runtime.multimodal.image_url import load_image_url
from vllm_tvm.runtime.multimodal.media_limits import check_item_count
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.structured_output import StructuredOutputsParams
from vllm_tvm.runtime.structured_output.logits_hook import GrammarConstraints
from vllm_tvm.runtime.tokenization import ChatTemplateError, Tokenizer
from vllm_tvm.runtime.tokenization.chat_messages import (
    UnsupportedContentError,
    image_urls,
    template_messages,
)
from vllm_tvm.server.config import ServerConfig
from vllm_tvm.server.errors import APIError
from vllm_tvm.server.generation import (
    Generation,
    PromptState,
    failure_status,
    run_unless_disconnected,
)
from vllm_tvm.server.logprobs import TokenText
from vllm_tvm.server.protocol import ChatMessage, Tool
from vllm_tvm.server.reasoning_parsers import ReasoningParser, reasoning_parser_for
from vllm_tvm.server.tool_parsers import ToolParser, get_tool_parser

logger = logging.getLogger("vllm_tvm.server")

UNTRUSTED_TEMPLATE = (
    "Chat template is passed with request, but --trust-request-chat-template is not set. "
    "Refused request with untrusted chat template."
)
"""vLLM's refusal of a request's own chat template when the server does not allow them."""

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")


async def off_loop(
    function: Callable[_Params, _Result], *args: _Params.args, **kwargs: _Params.kwargs
) -> _Result:
    """`function(*args, **kwargs)` run in a worker thread, leaving the event loop free."""
    return await run_in_threadpool(function, *args, **kwargs)


def read_chat_template(value: str | None) -> str | None:
    """`--chat-template`: a file's text when `value` names a file, else `value` itself
    (template text, or the name of a template the checkpoint ships)."""
    if value is None:
        return None
    path = Path(value)
    try:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    except OSError:  # a template text too long to be a path
        pass
    return value


def clipped(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text) - limit} more)"


class ServingContext:
    """The server's shared state over one `AsyncEngine` (see the module docstring).

    `constraints` lets several servers share one engine (tests); by default a new
    structured-output hook is made and added to the engine's logits hooks.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        config: ServerConfig,
        constraints: GrammarConstraints | None = None,
    ) -> None:
        self.engine = engine
        self.config = config
        self.tokenizer: Tokenizer = engine.tokenizer
        self.max_model_len: int = engine.max_model_len
        self.vocab_size: int = engine.vocab_size
        if constraints is None:
            constraints = GrammarConstraints(self.tokenizer, self.vocab_size, engine.eos_token_ids)
            engine.add_logits_hook(constraints)
        self.constraints = constraints
        self.chat_template = read_chat_template(config.chat_template)
        self.tool_parser: ToolParser = get_tool_parser(
            config.tool_call_parser, self.chat_template or self.tokenizer.chat_template
        )
        self.reasoning_parser: ReasoningParser | None = reasoning_parser_for(
            config.reasoning_parser, self.chat_template or self.tokenizer.chat_template
        )
        model_path = Path(config.engine.model)
        self.sampling_defaults = (
            generation_defaults_from_checkpoint(model_path) if model_path.is_dir() else {}
        )
        self.token_text = TokenText(self.tokenizer)
        self.created = int(time.time())
        self.image_intake = engine.image_intake
        self.image_placeholder = (
            None if self.image_intake is None else self.image_intake.placeholder
        )
        """What an image part renders as in the prompt text; None: image parts are refused."""

    @property
    def model_name(self) -> str:
        """The model id responses carry."""
        return self.config.model_name

    def check_model(self, name: str | None) -> None:
        """404 unless `name` is unset or one of the served names."""
        if name is not None and name not in self.config.model_names:
            raise APIError(
                f"The model `{name}` does not exist; served: {', '.join(self.config.model_names)}",
                HTTPStatus.NOT_FOUND,
                param="model",
            )

    @staticmethod
    def new_id(prefix: str) -> str:
        """A fresh response id such as cmpl-<32 hex digits>."""
        return f"{prefix}-{uuid.uuid4().hex}"

    def template_kwargs(self, request_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
        """Chat-template variables: --enable-thinking, then the request's own."""
        kwargs: dict[str, Any] = {}
        if self.config.enable_thinking is not None:
            kwargs["enable_thinking"] = self.config.enable_thinking
        kwargs.update(request_kwargs or {})
        return kwargs

    def render_chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[Tool] | None,
        add_generation_prompt: bool,
        continue_final_message: bool,
        chat_template: str | None,
        template_kwargs: Mapping[str, Any],
        documents: list[dict[str, Any]] | None = None,
    ) -> str:
        """The prompt text of a conversation; APIError 400 when the template refuses it."""
        if not messages:
            raise APIError("messages must not be empty", param="messages")
        if continue_final_message and add_generation_prompt:
            raise APIError(
                "continue_final_message and add_generation_prompt cannot both be true",
                param="continue_final_message",
            )
        if chat_template is None:
            chat_template = template_kwargs.get("chat_template")
        if chat_template is not None and not self.config.trust_request_chat_template:
            raise APIError(UNTRUSTED_TEMPLATE, param="chat_template")
        try:
            chat = template_messages(
                [item.model_dump(exclude_unset=True) for item in messages], self.image_placeholder
            )
        except UnsupportedContentError as err:
            raise APIError(str(err), param="messages") from err
        tool_dicts = [tool.model_dump(exclude_none=True) for tool in tools] if tools else None
        extra = {name: value for name, value in template_kwargs.items() if name != "chat_template"}
        if continue_final_message:
            extra["continue_final_message"] = True
        if documents is not None:
            extra["documents"] = documents
        try:
            return self.tokenizer.apply_chat_template(
                chat,
                add_generation_prompt=add_generation_prompt,
                tools=tool_dicts,
                chat_template=chat_template or self.chat_template,
                **extra,
            )
        except (ChatTemplateError, ValueError, TypeError) as err:
            raise APIError(f"chat template failed: {err}", param="messages") from err

    def with_server_defaults(
        self, constraint: StructuredOutputsParams | None
    ) -> StructuredOutputsParams | None:
        """`constraint` with the options the request left unset taken from the server's
        settings (--structured-outputs-config)."""
        if constraint is None or constraint.disable_additional_properties is not None:
            return constraint
        return dataclasses.replace(
            constraint, disable_additional_properties=self.config.disable_additional_properties
        )

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        """Token ids of `text`."""
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def chat_images(self, messages: Sequence[Any]) -> list[DecodedImage]:
        """The decoded images of a rendered chat's `image_url` parts, in prompt order; more
        than --limit-mm-per-prompt allows is a 400 before any is loaded, and a bad, truncated,
        oversized or unreachable one is a 400 naming its part. Fetching blocks: this runs
        off the event loop (chat.py builds its call in a worker thread)."""
        if self.image_placeholder is None:
            return []  # `render_chat` refused every image part by name
        parts = image_urls([item.model_dump(exclude_unset=True) for item in messages])
        try:
            check_item_count(self.config.limit_mm_per_prompt, "image", len(parts))
        except ValueError as err:
            raise APIError(str(err), param="messages") from err
        images = []
        sources = self.config.media_sources
        for name, url in parts:
            try:
                images.append(load_image_url(url, len(images), sources=sources))
            except ImageInputError as err:
                raise APIError(f"{name}: {err.reason}", param=name) from err
        return images

    def encode_chat(self, text: str, images: list[DecodedImage], add_special: bool) -> list[int]:
        """Token ids of a rendered chat, each image placeholder expanded into the image's
        soft tokens as the model's processor does (image_intake.py)."""
        if images:
            assert self.image_intake is not None  # `chat_images` found images
            try:
                text = self.image_intake.expand_text(text, images)
            except ValueError as err:
                raise APIError(str(err), param="messages") from err
        return self.encode(text, add_special)

    def log_request(self, request_id: str, prompt: str | list[int], params: SamplingParams) -> None:
        """Log an incoming request (--enable-log-requests), the prompt and each parameter
        cut to --max-log-len."""
        if self.config.enable_log_requests:
            limit = self.config.max_log_len
            shown = prompt if isinstance(prompt, str) else str(prompt)
            fields = ", ".join(
                f"{item.name}={clipped(repr(getattr(params, item.name)), limit)}"
                for item in dataclasses.fields(params)
            )
            logger.info("request %s: prompt %r, params: %s", request_id, shown[:limit], fields)

    def log_outputs(self, generation: Generation) -> None:
        """Log the outputs of each finished request of a call (--enable-log-outputs), cut to
        --max-log-len."""
        if not self.config.enable_log_outputs:
            return
        for request_id, state in zip(generation.request_ids, generation.states, strict=True):
            shown = [choice.text[: self.config.max_log_len] for choice in state.choices]
            finish = [str(choice.finish_reason) for choice in state.choices]
            logger.info("request %s finished %s: %r", request_id, finish, shown)

    async def run_to_end(
        self, generation: Generation, receive: Receive
    ) -> list[PromptState] | None:
        """Run a call answered with one JSON body to its end, close it and log its outputs.

        None when the client went away first (everything aborted); raises APIError (with the
        status `failure_status` gives) when a request failed.
        """
        try:
            states = await run_unless_disconnected(generation, receive)
        finally:
            await generation.aclose()
        if states is None:
            return None
        self.log_outputs(generation)
        errors = [state.error for state in states if state.error is not None]
        if errors:
            raise APIError(f"generation failed: {errors[0]}", failure_status(errors[0]))
        return states
