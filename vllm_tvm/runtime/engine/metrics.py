"""The engine's counters, gauges and latency histograms, as plain Python objects.

Why it exists: the OpenAI server exposes vLLM's `/metrics` series (vllm:num_requests_running,
vllm:kv_cache_usage_perc, vllm:prefix_cache_hits, vllm:time_to_first_token_seconds, ...).
The engine records them here as it steps, with no dependency on prometheus-client; the
server maps a `snapshot()` onto its registry. The engine thread writes and other threads
read, so every access takes the lock.
"""

from __future__ import annotations

import bisect
import copy
import threading
from collections import Counter
from dataclasses import dataclass, field

# vLLM's bucket bounds (seconds) for the three request-latency histograms.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


@dataclass
class Histogram:
    """Observations counted into buckets with upper bounds `bounds` (plus +Inf), and a sum.

    `counts[i]` counts observations <= bounds[i] that exceed bounds[i-1] (not cumulative);
    `counts[-1]` those above the last bound.
    """

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1


@dataclass
class EngineStats:
    """One consistent reading of every metric (see `EngineMetrics`)."""

    num_requests_running: int = 0
    num_requests_waiting: int = 0
    kv_cache_usage: float = 0.0
    recurrent_state_usage: float | None = None
    """Fraction of the recurrent-state slots held (None: the model keeps no such state)."""
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_preemptions: int = 0
    request_success: Counter[str] = field(default_factory=Counter)
    time_to_first_token: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    time_per_output_token: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS))
    e2e_request_latency: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    spec_decode_num_accepted_tokens_per_pos: list[int] = field(default_factory=list)

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens committed per verified draft, the bonus token included (vLLM's mean
        acceptance length); None before any draft."""
        if not self.spec_decode_num_drafts:
            return None
        return 1 + self.spec_decode_num_accepted_tokens / self.spec_decode_num_drafts


class EngineMetrics:
    """What the engine records while it steps; `snapshot()` reads it from any thread.

    Gauges: running / waiting sequences, KV usage (fraction of blocks in use, cached free
    blocks counted free) and, for a hybrid model, recurrent-state usage (fraction of slots
    held). Counters: prefix-cache queries and hits (in prompt tokens), prompt
    tokens computed, generated tokens, preemptions, finished requests by finish reason.
    Histograms: time to first token, time per output token (per request, after the first)
    and end-to-end latency, in seconds. Speculative decoding (vLLM's spec_decode series):
    drafts verified, draft tokens, accepted draft tokens, and accepted drafts per position.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = EngineStats()

    def snapshot(self) -> EngineStats:
        """A copy of every metric, taken at one instant."""
        with self._lock:
            return copy.deepcopy(self._stats)

    def set_gauges(
        self, running: int, waiting: int, kv_usage: float, recurrent_usage: float | None = None
    ) -> None:
        """Record the scheduler's state after a step."""
        with self._lock:
            stats = self._stats
            stats.num_requests_running, stats.num_requests_waiting = running, waiting
            stats.kv_cache_usage = kv_usage
            stats.recurrent_state_usage = recurrent_usage

    def add_prefix_query(self, queried_tokens: int, hit_tokens: int) -> None:
        """One prefix-cache lookup over `queried_tokens` that found `hit_tokens` cached."""
        with self._lock:
            self._stats.prefix_cache_queries += queried_tokens
            self._stats.prefix_cache_hits += hit_tokens

    def add_tokens(self, prompt: int, generated: int) -> None:
        """Prompt tokens computed and tokens generated by one step."""
        with self._lock:
            self._stats.prompt_tokens += prompt
            self._stats.generation_tokens += generated

    def add_preemption(self) -> None:
        """One running sequence was preempted (its KV dropped, to be recomputed)."""
        with self._lock:
            self._stats.num_preemptions += 1

    def add_first_token(self, seconds: float) -> None:
        """A sequence produced its first token `seconds` after its request arrived."""
        with self._lock:
            self._stats.time_to_first_token.observe(seconds)

    def add_finished(
        self, finish_reason: str, e2e_seconds: float, decode_seconds: float, output_tokens: int
    ) -> None:
        """A sequence finished: its reason, latency and (if it decoded) mean time per token."""
        with self._lock:
            stats = self._stats
            stats.request_success[finish_reason] += 1
            stats.e2e_request_latency.observe(e2e_seconds)
            if output_tokens > 1:
                stats.time_per_output_token.observe(decode_seconds / (output_tokens - 1))

    def enable_spec_decode(self, num_positions: int) -> None:
        """Speculation drafts up to `num_positions` tokens a step: count acceptance per
        position from now on (an empty per-position list means speculation is off)."""
        with self._lock:
            self._stats.spec_decode_num_accepted_tokens_per_pos = [0] * num_positions

    def add_spec_decode(self, num_draft_tokens: int, num_accepted: int) -> None:
        """One draft of `num_draft_tokens` tokens verified, its first `num_accepted` accepted."""
        with self._lock:
            stats = self._stats
            stats.spec_decode_num_drafts += 1
            stats.spec_decode_num_draft_tokens += num_draft_tokens
            stats.spec_decode_num_accepted_tokens += num_accepted
            per_pos = stats.spec_decode_num_accepted_tokens_per_pos
            for position in range(num_accepted):
                per_pos[position] += 1
