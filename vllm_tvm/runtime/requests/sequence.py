"""A request inside the engine: one `EngineSequence` per completion being generated, grouped
by `Request` (a prompt with `n` completions).

Why it exists: the scheduler, block manager and engine all need the same facts about a
completion in flight (its tokens, how many of them are in the KV cache, its sampling and
stop state, its timings) and the front ends need its progress as vLLM `RequestOutput`s,
whole or as deltas. Both live here, so the other modules only move sequences around.
"""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from vllm_tvm.runtime.requests.outputs import CompletionOutput, RequestMetrics, RequestOutput
from vllm_tvm.runtime.requests.prompt_images import PromptImages
from vllm_tvm.runtime.requests.stop_checker import StopChecker, TextDecoder
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import SamplingContext, TokenLogprobs

OutputKind = Literal["cumulative", "delta", "final_only"]
"""What each RequestOutput of a request carries (vLLM's RequestOutputKind): everything so
far, only what is new since the previous one, or a single output when the request ends."""

FINISH_ABORT = "abort"
FINISH_ERROR = "error"

_seq_ids = itertools.count()


class SequenceStatus(enum.Enum):
    """Where a sequence is: queued (new or preempted), scheduled each step, or done."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class NoTextDecoder:
    """The decoder of a request with `detokenize=False`: every token adds no text."""

    def add(self, token_id: int) -> str:
        """No text for any id."""
        return ""

    def flush(self) -> str:
        """Nothing held back."""
        return ""


@dataclass(eq=False)
class EngineSequence:
    """One completion in flight (equal only to itself: the scheduler finds sequences in its
    queues by identity, not by comparing every field).

    `token_ids` is the prompt followed by the output so far; `num_computed_tokens` of them
    have their keys and values in the KV cache (the last sampled token never has until the
    next step computes it). `kv_id` names the sequence's KV sequence while it holds blocks;
    `recurrent_slot` its slot of the recurrent-state pool while it runs (hybrid models).
    """

    request_id: str
    index: int
    params: SamplingParams
    prompt_token_ids: list[int]
    sampling: SamplingContext
    stops: StopChecker
    decoder: TextDecoder
    arrival_time: float
    priority: int = 0
    seq_id: int = field(default_factory=lambda: next(_seq_ids))
    status: SequenceStatus = SequenceStatus.WAITING
    token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    kv_id: int | None = None
    recurrent_slot: int | None = None
    block_hashes: list[bytes] = field(default_factory=list)
    images: PromptImages | None = None
    """The prompt's images (shared by the request's sequences); None: text only."""
    text: str = ""
    logprobs: list[TokenLogprobs] | None = None
    cumulative_logprob: float = 0.0
    prompt_logprobs: list[TokenLogprobs | None] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    error: str | None = None
    num_preemptions: int = 0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    max_token_gap: float = 0.0
    finished_time: float | None = None
    # What the previous delta output already carried.
    sent_tokens: int = 0
    sent_text: int = 0

    def __post_init__(self) -> None:
        self.token_ids = list(self.prompt_token_ids)
        if self.params.logprobs is not None:
            self.logprobs = []
        if self.params.prompt_logprobs is not None:
            self.prompt_logprobs = [None]

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens."""
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        """Prompt tokens."""
        return len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        """Tokens generated so far."""
        return self.sampling.output_token_ids

    @property
    def is_finished(self) -> bool:
        """Whether the sequence has stopped (for any reason)."""
        return self.status is SequenceStatus.FINISHED

    @property
    def wants_prompt_logprobs(self) -> bool:
        """Whether prompt positions still need their logprobs computed."""
        return self.prompt_logprobs is not None and len(self.prompt_logprobs) < len(
            self.prompt_token_ids
        )

    def append_token(self, token_id: int, logprobs: TokenLogprobs | None, now: float) -> None:
        """Record one sampled token: output, logprobs, stop state, streamed text."""
        self.push_token(token_id, logprobs, now)
        self.render_token(token_id, now)

    def push_token(self, token_id: int, logprobs: TokenLogprobs | None, now: float) -> bool:
        """What the next step needs of a sampled token (ids, logprobs, timing, the stop
        count), without its text; True when the token ends the sequence by itself (an EOS or
        stop id, the length limit). `render_token` must follow before the next push."""
        self.token_ids.append(token_id)
        self.sampling.output_token_ids.append(token_id)
        if self.logprobs is not None and logprobs is not None:
            self.logprobs.append(logprobs)
            self.cumulative_logprob += logprobs.logprob
        last = self.last_token_time
        if last is None:
            self.first_token_time = now
        elif now - last > self.max_token_gap:
            self.max_token_gap = now - last
        self.last_token_time = now
        return self.stops.count(token_id)

    def render_token(self, token_id: int, now: float) -> None:
        """The pushed token's text and stop strings; finishes the sequence when it stops."""
        step = self.stops.render(token_id, self.decoder)
        if step.text:
            self.text += step.text
        if step.finished:
            self.finish(step.finish_reason or "stop", step.stop_reason, now=now)

    def finish(
        self,
        reason: str,
        stop_reason: int | str | None = None,
        error: str | None = None,
        now: float | None = None,
    ) -> None:
        """Mark the sequence done (the engine frees its blocks)."""
        self.status = SequenceStatus.FINISHED
        self.finish_reason, self.stop_reason, self.error = reason, stop_reason, error
        self.finished_time = time.perf_counter() if now is None else now

    def completion(self, delta: bool) -> CompletionOutput:
        """This sequence as a CompletionOutput: all so far, or what is new since the last
        delta (which this call then marks as sent)."""
        output_token_ids = self.sampling.output_token_ids
        text = self.text
        tokens_from = text_from = 0
        if delta:
            tokens_from, text_from = self.sent_tokens, self.sent_text
            self.sent_tokens, self.sent_text = len(output_token_ids), len(text)
        logprobs = self.logprobs
        # Positional arguments in field order: this runs per request per step when streaming.
        return CompletionOutput(
            self.index,
            text[text_from:],
            output_token_ids[tokens_from:],
            self.finish_reason,
            self.stop_reason,
            None if logprobs is None else self.cumulative_logprob,
            None if logprobs is None else logprobs[tokens_from:],
        )


class ScheduledSequence(NamedTuple):
    """`num_tokens` tokens of `seq`, from its `num_computed_tokens` on, run this step."""

    seq: EngineSequence
    num_tokens: int


@dataclass
class Request:
    """A prompt and its `n` sequences (children seeded seed, seed+1, ... when seeded)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    seqs: list[EngineSequence]
    output_kind: OutputKind = "cumulative"
    arrival_time: float = field(default_factory=time.perf_counter)
    sent_prompt_logprobs: bool = False

    @property
    def is_finished(self) -> bool:
        """Whether every sequence has stopped."""
        for seq in self.seqs:  # a loop, not all(): this runs for every request every step
            if seq.status is not SequenceStatus.FINISHED:
                return False
        return True

    @property
    def error(self) -> str | None:
        """The first failure among the sequences, if any."""
        for seq in self.seqs:
            if seq.error is not None:
                return seq.error
        return None

    def make_output(self) -> RequestOutput | None:
        """The output to hand out after a step that touched this request (None when its
        kind says to wait for the end)."""
        finished = self.is_finished
        output_kind = self.output_kind
        if output_kind == "final_only" and not finished:
            return None
        delta = output_kind == "delta"
        seqs = self.seqs
        prompt_logprobs = seqs[0].prompt_logprobs
        if delta and self.sent_prompt_logprobs:
            prompt_logprobs = None
        self.sent_prompt_logprobs = True
        # Positional arguments in field order: this runs per request per step when streaming.
        return RequestOutput(
            self.request_id,
            self.prompt,
            self.prompt_token_ids,
            [seq.completion(delta) for seq in seqs],
            finished,
            self.metrics(),
            prompt_logprobs,
            seqs[0].num_cached_tokens,
            self.error,
        )

    def metrics(self) -> RequestMetrics:
        """Timings of the request (of its first sequence when n > 1)."""
        seq = self.seqs[0]
        first = seq.first_token_time
        if first is None:
            return RequestMetrics(arrival_time=self.arrival_time, finished_time=seq.finished_time)
        scheduled, last = seq.first_scheduled_time, seq.last_token_time
        return RequestMetrics(  # positional, in field order (see make_output)
            0.0 if scheduled is None else first - scheduled,  # prefill_seconds
            0.0 if last is None else last - first,  # decode_seconds
            first - self.arrival_time,  # time_to_first_token
            max(len(seq.sampling.output_token_ids) - 1, 0),  # decode_tokens
            self.arrival_time,
            seq.finished_time,
            seq.max_token_gap,
        )
