"""`AsyncEngine`: the engine for asyncio code (the OpenAI server). The step loop runs in a
thread of its own; each request gets an async stream of its outputs and can be aborted.

Why: a step is a blocking forward; run on the event loop it would stall every connection.
The `LLMEngine` is not thread-safe, so only the loop thread touches its state: callers
validate a request in their own thread (so a bad one raises at once, in the caller), then
post commands (add, abort, reset) that the loop runs between steps. Outputs travel back to
each request's asyncio.Queue through `loop.call_soon_threadsafe`. A stream whose consumer
goes away (task cancelled, client disconnected) aborts its request, freeing its blocks.

What is taken in is bounded (admission.py): callers `reserve` a call's requests first.
`stop_admitting` (the server's SIGTERM) refuses new calls and aborts every request in
flight, so each stream ends at once with a finish_reason "abort" output.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from vllm_tvm.runtime.engine.admission import Admission, AdmissionLimits
from vllm_tvm.runtime.engine.image_intake import ImageIntake
from vllm_tvm.runtime.engine.llm_engine import LLMEngine, LogitsHook, PromptInput
from vllm_tvm.runtime.engine.metrics import EngineStats
from vllm_tvm.runtime.engine.scheduler import SchedulerConfig
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.requests.outputs import RequestOutput
from vllm_tvm.runtime.requests.sequence import OutputKind, Request
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.tokenization import Tokenizer

logger = logging.getLogger(__name__)


class EngineDeadError(RuntimeError):
    """The engine loop failed outside any one request; in-flight requests end with it."""


class _Stream:
    """Where one request's outputs go: a queue on the caller's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()

    def put(self, item: RequestOutput | BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass


class AsyncEngine:
    """Runs an `LLMEngine` in a background thread for asyncio callers."""

    def __init__(self, engine: LLMEngine, limits: AdmissionLimits | None = None) -> None:
        self.engine = engine
        self.admission = Admission(limits or AdmissionLimits())
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wakeup = threading.Event()
        self._streams: dict[str, _Stream] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="vllm-tvm-engine", daemon=True)
        self._thread.start()

    # ---- what callers read of the engine (settled when it was built) ----

    @property
    def tokenizer(self) -> Tokenizer | None:
        return self.engine.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def image_intake(self) -> ImageIntake | None:
        """The engine's image intake (None: the model takes text only)."""
        return self.engine.intake.image_intake

    @property
    def vocab_size(self) -> int:
        """Rows of the model's logits (may exceed the tokenizer's vocabulary)."""
        return self.engine.runner.vocab_size

    @property
    def eos_token_ids(self) -> list[int]:
        return self.engine.eos_token_ids

    @property
    def cache_config(self) -> CacheConfig:
        return self.engine.cache_config

    @property
    def scheduler_config(self) -> SchedulerConfig:
        return self.engine.scheduler_config

    def add_logits_hook(self, hook: LogitsHook) -> None:
        """Run `hook` on every step's logits (add hooks before the first request)."""
        self.engine.logits_hooks.append(hook)

    def check_request(
        self,
        prompt: PromptInput,
        params: SamplingParams,
        request_id: str,
        priority: int = 0,
        images: Sequence[DecodedImage] = (),
    ) -> None:
        """Raise what `generate` would raise for this request, without queuing it."""
        self.engine.make_request(prompt, params, request_id, priority, images=images)

    # ---- caller side ----

    def reserve(self, request_ids: list[str], num_sequences_each: int) -> None:
        """Admit one call's requests before generating them, or raise the
        `AdmissionRefused` that says why not; see admission.py. `generate` releases each."""
        self.admission.reserve(request_ids, num_sequences_each)

    def release(self, request_ids: list[str]) -> None:
        """Give back the reservations of requests that will not be generated after all."""
        for request_id in request_ids:
            self.admission.release(request_id)

    def stop_admitting(self) -> None:
        """Refuse every new call and abort every request in flight: each stream ends with
        a finish_reason "abort" output (safe from a signal handler on the event loop)."""
        self.admission.stop()
        self._post(self.engine.abort_all)

    async def generate(
        self,
        prompt: PromptInput,
        params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        output_kind: OutputKind = "delta",
        images: Sequence[DecodedImage] = (),
    ) -> AsyncIterator[RequestOutput]:
        """Queue a request; yield its outputs until the finished one.

        Validation errors (prompt too long, bad parameters) raise here, before anything is
        queued. A request that fails later ends with an output whose finish_reason is
        "error". Leaving the iteration early aborts the request.
        """
        request = self.engine.make_request(
            prompt, params, request_id, priority, output_kind, images
        )
        request_id = request.request_id
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already in use")
        stream = _Stream(asyncio.get_running_loop())
        self._streams[request_id] = stream
        self._post(lambda: self._add(request, stream))
        finished = False
        try:
            while not finished:
                item = await stream.queue.get()
                self.admission.release(request_id)
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
        finally:
            self.admission.release(request_id)
            self._streams.pop(request_id, None)
            if not finished:
                self._post(lambda: self.engine.abort_request(request_id))

    async def abort(self, request_id: str) -> None:
        """Abort a request: its stream ends with a finish_reason "abort" output."""
        self._post(lambda: self.engine.abort_request(request_id))

    async def reset_prefix_cache(self) -> bool:
        """Drop every cached prefix block; True on success."""
        return await self._call(self.engine.reset_prefix_cache)

    async def has_unfinished(self) -> bool:
        """Whether a request is still queued or running (or its last output undelivered)."""
        return await self._call(lambda: self.engine.has_unfinished)

    def stats(self) -> EngineStats:
        """The engine's metrics, read at one instant."""
        return self.engine.metrics.snapshot()

    def shutdown(self) -> None:
        """Stop the loop thread (requests in flight are not finished)."""
        self._stopped = True
        self._wakeup.set()
        self._thread.join()

    async def _call(self, function: Callable[[], Any]) -> Any:
        """Run `function` on the loop thread and await its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def run() -> None:
            try:
                result = function()
            except Exception as err:
                loop.call_soon_threadsafe(future.set_exception, err)
            else:
                loop.call_soon_threadsafe(future.set_result, result)

        self._post(run)
        return await future

    def _post(self, command: Callable[[], None]) -> None:
        self._commands.put(command)
        self._wakeup.set()

    # ---- loop thread ----

    def _add(self, request: Request, stream: _Stream) -> None:
        try:
            self.engine.add(request)
        except ValueError as err:
            stream.put(err)
            return
        if self.admission.stopping:  # posted before the stop, added after its abort-all
            self.engine.abort_request(request.request_id)

    def _run(self) -> None:
        while not self._stopped:
            self._wakeup.clear()
            while not self._commands.empty():
                self._commands.get()()
            if not self.engine.has_unfinished:
                self._wakeup.wait()
                continue
            try:
                outputs = self.engine.step()
            except Exception as err:
                logger.exception("engine step failed; ending the requests in flight")
                self._fail_all(err)
                continue
            for output in outputs:
                stream = self._streams.get(output.request_id)
                if stream is not None:
                    stream.put(output)

    def _fail_all(self, err: Exception) -> None:
        """After an unexpected step failure: free every request and end every stream."""
        dead = EngineDeadError(f"engine step failed: {err!r}")
        for request_id, stream in list(self._streams.items()):
            self.engine.abort_request(request_id)
            stream.put(dead)
