"""Result objects with vLLM's names (`RequestOutput.outputs[0].token_ids`, `.text`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_tvm.runtime.sampler import TokenLogprobs


@dataclass
class CompletionOutput:
    """One generated sequence of a request."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    cumulative_logprob: float | None = None
    logprobs: list[TokenLogprobs] | None = None


@dataclass
class RequestMetrics:
    """Wall-clock timings of one request, in seconds."""

    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    time_to_first_token: float = 0.0
    decode_tokens: int = 0

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens per second over the decode steps (tokens after the first)."""
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass
class RequestOutput:
    """A request's prompt and its completions."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
