"""From per-request timings to one level's numbers (vLLM's benchmark names and units).

Why it exists: the definitions decide what a number means, so they live in one place.
- duration: first request submitted to last request finished, seconds.
- request_throughput: requests / duration; output_throughput: generated tokens / duration;
  total_token_throughput: (prompt + generated tokens) / duration.
- TTFT: submit to first token, per request (includes tokenization in timed-string mode).
- TPOT: (last token - first token) / (output tokens - 1), per request; requests with one
  output token have none.
- ITL: the gap between consecutive tokens of a request; its mean over every gap of every
  request is the decode time of all requests over all their tokens after the first.
- max ITL: the longest gap between consecutive tokens of any request (the worst stall a
  stream saw, e.g. behind another request's long prompt).
- E2EL: submit to last token, per request.
Latencies are reported in milliseconds as mean, median and 99th percentile (numpy's linear
interpolation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vllm_tvm.runtime.engine.metrics import EngineStats


@dataclass(frozen=True)
class RequestTiming:
    """One finished request, times in `time.perf_counter()` seconds."""

    prompt_tokens: int
    output_tokens: int
    submitted: float
    first_token: float
    finished: float
    max_inter_token: float = 0.0

    @property
    def ttft(self) -> float:
        """Submit to first token, seconds."""
        return self.first_token - self.submitted

    @property
    def decode_seconds(self) -> float:
        """First token to last token, seconds."""
        return self.finished - self.first_token

    @property
    def tpot(self) -> float | None:
        """Mean seconds per output token after the first (None with a single token)."""
        gaps = self.output_tokens - 1
        return self.decode_seconds / gaps if gaps > 0 else None


@dataclass(frozen=True)
class LevelMetrics:
    """The measurements of one concurrency level (keys as in vLLM's benchmark JSON)."""

    concurrency: int
    completed: int
    duration: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None
    max_itl_ms: float | None
    mean_e2el_ms: float
    median_e2el_ms: float
    p99_e2el_ms: float
    mean_acceptance_length: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _stats_ms(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, median, p99) of `values` seconds, in milliseconds."""
    array = np.asarray(values, dtype=np.float64) * 1e3
    return float(array.mean()), float(np.median(array)), float(np.percentile(array, 99))


def summarize_level(
    concurrency: int, timings: Sequence[RequestTiming], duration: float
) -> LevelMetrics:
    """The metrics of one level from its requests and its wall-clock `duration`."""
    if not timings:
        raise ValueError(f"concurrency {concurrency}: no finished request to summarize")
    if duration <= 0:
        raise ValueError(f"concurrency {concurrency}: duration must be positive, got {duration}")
    input_tokens = sum(t.prompt_tokens for t in timings)
    output_tokens = sum(t.output_tokens for t in timings)
    ttft = _stats_ms([t.ttft for t in timings])
    e2el = _stats_ms([t.finished - t.submitted for t in timings])
    tpots = [t.tpot for t in timings if t.tpot is not None]
    tpot: tuple[float | None, ...] = _stats_ms(tpots) if tpots else (None, None, None)
    gaps = sum(t.output_tokens - 1 for t in timings)
    itl = sum(t.decode_seconds for t in timings) / gaps * 1e3 if gaps > 0 else None
    return LevelMetrics(
        concurrency=concurrency,
        completed=len(timings),
        duration=duration,
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        request_throughput=len(timings) / duration,
        output_throughput=output_tokens / duration,
        total_token_throughput=(input_tokens + output_tokens) / duration,
        mean_ttft_ms=ttft[0],
        median_ttft_ms=ttft[1],
        p99_ttft_ms=ttft[2],
        mean_tpot_ms=tpot[0],
        median_tpot_ms=tpot[1],
        p99_tpot_ms=tpot[2],
        mean_itl_ms=itl,
        max_itl_ms=max(t.max_inter_token for t in timings) * 1e3 if gaps > 0 else None,
        mean_e2el_ms=e2el[0],
        median_e2el_ms=e2el[1],
        p99_e2el_ms=e2el[2],
    )


def mean_acceptance_length(before: EngineStats, after: EngineStats) -> float | None:
    """Tokens committed per verified draft between two engine readings, the bonus token
    included (vLLM's mean acceptance length); None when nothing was drafted."""
    drafts = after.spec_decode_num_drafts - before.spec_decode_num_drafts
    if not drafts:
        return None
    accepted = after.spec_decode_num_accepted_tokens - before.spec_decode_num_accepted_tokens
    return 1 + accepted / drafts
