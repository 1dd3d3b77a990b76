"""Result objects with vLLM's names (`RequestOutput.outputs[0].token_ids`, `.text`).

A finish_reason is "stop", "length", "abort" (the request was aborted) or "error" (it failed;
`RequestOutput.error` says why)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_tvm.runtime.sampling.sampler import TokenLogprobs


@dataclass(slots=True)
class CompletionOutput:
    """One generated sequence of a request."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    cumulative_logprob: float | None = None
    logprobs: list[TokenLogprobs] | None = None


@dataclass(slots=True)
class RequestMetrics:
    """Wall-clock timings of one request, in seconds (`*_time` are `time.perf_counter()`
    readings; prefill runs from first scheduled to first token, decode from there to the
    last token; `max_inter_token_seconds` is the longest wait between two of its tokens)."""

    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    time_to_first_token: float = 0.0
    decode_tokens: int = 0
    arrival_time: float | None = None
    finished_time: float | None = None
    max_inter_token_seconds: float = field(default=0.0, compare=False)
    """A diagnostic of how the request was served, not part of its timings' identity."""

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens per second over the decode steps (tokens after the first)."""
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass(slots=True)
class RequestOutput:
    """A request's prompt and its completions."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    prompt_logprobs: list[TokenLogprobs | None] | None = None
    """Per prompt token (None for the first, which nothing predicts), when asked for."""
    num_cached_tokens: int = 0
    """Prompt tokens found in the prefix cache instead of computed."""
    error: str | None = None
    """Why the request failed (its completions then finish with reason "error")."""
