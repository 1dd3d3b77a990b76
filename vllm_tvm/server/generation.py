"""One API call's requests on the engine: validated together, run together, their deltas
merged into one stream and accumulated into per-choice state.

Why it exists: a completion call may carry several prompts, each an engine request with `n`
sequences, and both routes need the same life cycle around them: refuse the whole call
before anything runs when one prompt or constraint is bad (400, never a half-started
batch) or the engine does not admit it (runtime/engine/admission.py: 400, 429 or 503),
register structured-output constraints under the engine request ids, stream the outputs of
all requests as they come, and, when the client goes away or the call ends early for any
reason, abort what still runs (freeing its KV blocks) and drop the constraints. A call
that only scores its prompts (completions' `echo` with `max_tokens` 0) runs each for one
token, as vLLM does, and keeps nothing of it: its choices end with reason `length`, no
text and no tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from http import HTTPStatus

from starlette.types import Receive

from vllm_tvm.runtime.engine.admission import (
    EngineBusyError,
    EngineStoppingError,
    TooManySequencesError,
)
from vllm_tvm.runtime.engine.async_engine import AsyncEngine
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.requests.outputs import CompletionOutput, RequestOutput
from vllm_tvm.runtime.sampling.dispatch import SAMPLING_FAULT
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import TokenLogprobs
from vllm_tvm.runtime.structured_output import StructuredOutputsParams
from vllm_tvm.runtime.structured_output.logits_hook import GrammarConstraints
from vllm_tvm.server.errors import APIError


@dataclass
class Prompt:
    """A prompt as token ids, with its text when it came as text (for echo and logs)."""

    token_ids: list[int]
    text: str | None = None
    images: Sequence[DecodedImage] = ()
    """The prompt's images, one per image placeholder in `token_ids` (chat requests)."""


@dataclass
class ChoiceState:
    """Everything one choice (one sequence of one prompt) has produced so far."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class PromptState:
    """One prompt's request: its choices, prompt logprobs and failure, if any."""

    prompt: Prompt
    choices: list[ChoiceState]
    prompt_logprobs: list[TokenLogprobs | None] | None = None
    num_cached_tokens: int = 0
    error: str | None = None


@dataclass(frozen=True)
class ChoiceDelta:
    """What one engine output added to one choice."""

    prompt_index: int
    choice: ChoiceState
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprobs] | None
    finished: bool
    first: bool
    """True for the first delta of this choice (echo and role headers go there)."""


_DONE = object()

SERVER_FAULTS = ("forward failed", "output processing failed", SAMPLING_FAULT)
"""How the engine's messages for its own failures begin; any other failed request failed
because of what it asked (its masks left no token to sample, e.g. min_tokens against a
grammar that can only end)."""


def failure_status(error: str) -> HTTPStatus:
    """400 for a request that failed because of its own parameters, 500 for a server fault."""
    if error.startswith(SERVER_FAULTS):
        return HTTPStatus.INTERNAL_SERVER_ERROR
    return HTTPStatus.BAD_REQUEST


class Generation:
    """The engine requests of one API call (see the module docstring).

    Use `await Generation.start(...)` (raises APIError 400 when a prompt or parameter is
    refused), then iterate `deltas()` or call `run_to_end()`, and always `aclose()`.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        constraints: GrammarConstraints,
        request_ids: list[str],
        prompts: list[Prompt],
        params: SamplingParams,
        priority: int,
        score_only: bool = False,
    ) -> None:
        self._engine = engine
        self._score_only = score_only
        self._constraints = constraints
        self.request_ids = request_ids
        self.params = params
        self._priority = priority
        self.states = [
            PromptState(p, [ChoiceState(i * params.n + j) for j in range(params.n)])
            for i, p in enumerate(prompts)
        ]
        self._started: set[int] = set()
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def start(
        cls,
        engine: AsyncEngine,
        constraints: GrammarConstraints,
        request_id: str,
        prompts: list[Prompt],
        params: SamplingParams,
        structured: StructuredOutputsParams | None,
        priority: int = 0,
        max_logprobs: int = -1,
        score_only: bool = False,
    ) -> Generation:
        """Validate every prompt and the constraint, then register the constraint.
        `score_only`: keep none of the generated output (see the module docstring)."""
        if not prompts:
            raise APIError("prompt must not be empty", param="prompt")
        ids = (
            [request_id]
            if len(prompts) == 1
            else [f"{request_id}-{i}" for i in range(len(prompts))]
        )
        _reserve(engine, ids, params.n)
        try:
            params.verify_for_vocab(engine.vocab_size, max_logprobs)
            for prompt, rid in zip(prompts, ids, strict=True):
                engine.check_request(prompt.token_ids, params, rid, priority, prompt.images)
        except (ValueError, TypeError) as err:
            engine.release(ids)
            raise APIError(str(err)) from err
        generation = cls(engine, constraints, ids, prompts, params, priority, score_only)
        if structured is not None:
            try:
                for rid in ids:
                    await asyncio.to_thread(constraints.register, rid, structured)
            except ValueError as err:
                generation.release()
                raise APIError(str(err), param="structured_outputs") from err
        return generation

    def release(self) -> None:
        """Drop the structured-output constraints and admission slots of this call's
        requests."""
        for rid in self.request_ids:
            self._constraints.release(rid)
        self._engine.release(self.request_ids)

    async def deltas(self) -> AsyncIterator[ChoiceDelta]:
        """Each choice's progress as the engine reports it, all prompts merged."""
        queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()
        self._tasks = [
            asyncio.create_task(self._pump(index, queue)) for index in range(len(self.states))
        ]
        remaining = len(self._tasks)
        while remaining:
            index, item = await queue.get()
            if item is _DONE:
                remaining -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, RequestOutput)
            for delta in self._absorb(index, item):
                yield delta

    async def run_to_end(self) -> list[PromptState]:
        """Run every request to its end; the accumulated states."""
        async for _delta in self.deltas():
            pass
        return self.states

    async def aclose(self) -> None:
        """Abort whatever still runs and release the constraints (idempotent)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        self.release()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _pump(self, index: int, queue: asyncio.Queue[tuple[int, object]]) -> None:
        prompt = self.states[index].prompt
        stream = self._engine.generate(
            prompt.token_ids,
            self.params,
            self.request_ids[index],
            self._priority,
            "delta",
            prompt.images,
        )
        try:
            async for output in stream:
                queue.put_nowait((index, output))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            queue.put_nowait((index, err))
        finally:
            await stream.aclose()
            queue.put_nowait((index, _DONE))

    def _absorb(self, index: int, output: RequestOutput) -> list[ChoiceDelta]:
        state = self.states[index]
        if output.prompt_logprobs is not None and state.prompt_logprobs is None:
            state.prompt_logprobs = output.prompt_logprobs
        state.num_cached_tokens = output.num_cached_tokens
        if output.error is not None:
            state.error = output.error
        deltas = []
        for completion in output.outputs:
            choice = state.choices[completion.index]
            if choice.finish_reason is not None:
                continue
            first = choice.index not in self._started
            self._started.add(choice.index)
            if self._score_only:
                completion = _nothing_kept(completion)
            choice.text += completion.text
            choice.token_ids.extend(completion.token_ids)
            if completion.logprobs:
                choice.logprobs.extend(completion.logprobs)
            choice.finish_reason = completion.finish_reason
            choice.stop_reason = completion.stop_reason
            deltas.append(
                ChoiceDelta(
                    prompt_index=index,
                    choice=choice,
                    text=completion.text,
                    token_ids=list(completion.token_ids),
                    logprobs=completion.logprobs,
                    finished=completion.finish_reason is not None,
                    first=first,
                )
            )
        return deltas


def _reserve(engine: AsyncEngine, request_ids: list[str], n: int) -> None:
    """Admit the call's requests, or raise the APIError of the refusal: 400 for too many
    sequences, 429 when too many requests wait, 503 when the server is shutting down."""
    try:
        engine.reserve(request_ids, n)
    except TooManySequencesError as err:
        raise APIError(str(err), param="n") from err
    except EngineBusyError as err:
        raise APIError(str(err), HTTPStatus.TOO_MANY_REQUESTS) from err
    except EngineStoppingError as err:
        raise APIError(str(err), HTTPStatus.SERVICE_UNAVAILABLE) from err


def _nothing_kept(completion: CompletionOutput) -> CompletionOutput:
    """What a score-only call keeps of a completion: no text, tokens or logprobs, and at
    its end the reason `length` (its budget of 0), unless the request failed."""
    finish = completion.finish_reason
    return replace(
        completion,
        text="",
        token_ids=[],
        logprobs=None,
        finish_reason=finish if finish in (None, "error") else "length",
        stop_reason=None,
    )


async def until_disconnected(receive: Receive) -> None:
    """Return once the ASGI `receive` channel reports that the client went away."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def run_unless_disconnected(
    generation: Generation, receive: Receive
) -> list[PromptState] | None:
    """Run `generation` to its end; None (everything aborted) if the client leaves first."""
    work = asyncio.create_task(generation.run_to_end())
    watch = asyncio.create_task(until_disconnected(receive))
    try:
        done, _pending = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    if work not in done:
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return None
    return work.result()
