"""GET /metrics: the engine's counters, gauges and histograms as vLLM's Prometheus series.

Why it exists: the engine keeps its metrics as plain Python objects (no Prometheus
dependency); dashboards built for vLLM read `vllm:*` names with a `model_name` label. A
custom collector reads one engine snapshot per scrape and renders it in the text format
0.0.4 through prometheus-client, so the values are always consistent with each other.
Counters are exposed with prometheus-client's `_total` suffix, as vLLM's are.

A hybrid model's recurrent-state pool has no vLLM series (vLLM counts its state in the KV
cache's blocks); it is exposed under `vllm_tvm:` names, only when the model keeps one:
`vllm_tvm:recurrent_state_usage_perc` (slots held by running sequences, 1 = all) and
`vllm_tvm:recurrent_state_config_info` (slots and bytes per slot).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from vllm_tvm.runtime.engine.metrics import EngineStats, Histogram
from vllm_tvm.runtime.kv.cache_config import CacheConfig

FINISH_REASONS = ("stop", "length", "abort", "error")


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    """Cumulative (le, count) pairs, +Inf last, from per-bucket counts."""
    pairs: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(histogram.bounds, histogram.counts, strict=False):
        running += count
        pairs.append((repr(float(bound)), running))
    pairs.append(("+Inf", histogram.count))
    return pairs


class EngineCollector(Collector):
    """Renders `stats()` (an engine snapshot) as vLLM's series, labelled `model_name`."""

    def __init__(
        self, stats: Callable[[], EngineStats], model_name: str, cache: CacheConfig
    ) -> None:
        self._stats = stats
        self._model = model_name
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        """One family per series, all read from the same snapshot."""
        stats = self._stats()
        labels, values = ["model_name"], [self._model]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=labels)
            family.add_metric(values, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=labels)
            family.add_metric(values, value)
            return family

        def histogram(name: str, doc: str, data: Histogram) -> HistogramMetricFamily:
            family = HistogramMetricFamily(name, doc, labels=labels)
            family.add_metric(values, _buckets(data), data.total)
            return family

        yield gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            stats.num_requests_running,
        )
        yield gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            stats.num_requests_waiting,
        )
        yield gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            stats.kv_cache_usage,
        )
        yield counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats.prefix_cache_queries,
        )
        yield counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            stats.prefix_cache_hits,
        )
        yield counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens
        )
        yield counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            stats.generation_tokens,
        )
        yield counter(
            "vllm:num_preemptions",
            "Cumulative number of preemptions from the engine.",
            stats.num_preemptions,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of finished requests, by finish reason.",
            labels=[*labels, "finished_reason"],
        )
        for reason in sorted(set(FINISH_REASONS) | set(stats.request_success)):
            success.add_metric([*values, reason], stats.request_success.get(reason, 0))
        yield success
        yield histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            stats.time_to_first_token,
        )
        yield histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            stats.time_per_output_token,
        )
        yield histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            stats.e2e_request_latency,
        )
        yield from _spec_decode_series(stats, labels, values)
        yield from self._recurrent_state_series(stats, labels, values)
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the KV cache configuration.",
            labels=["block_size", "num_gpu_blocks", "enable_prefix_caching"],
        )
        cache = self._cache
        info.add_metric(
            [str(cache.block_size), str(cache.num_blocks), str(cache.enable_prefix_caching)], 1
        )
        yield info

    def _recurrent_state_series(
        self, stats: EngineStats, labels: list[str], values: list[str]
    ) -> Iterator[Metric]:
        """The recurrent-state pool's usage and size, when the model keeps one."""
        cache = self._cache
        if not cache.recurrent_slots or stats.recurrent_state_usage is None:
            return
        usage = GaugeMetricFamily(
            "vllm_tvm:recurrent_state_usage_perc",
            "Recurrent-state slot usage (hybrid models). 1 means 100 percent usage.",
            labels=labels,
        )
        usage.add_metric(values, stats.recurrent_state_usage)
        yield usage
        info = GaugeMetricFamily(
            "vllm_tvm:recurrent_state_config_info",
            "Information of the recurrent-state pool configuration.",
            labels=["num_slots", "bytes_per_slot"],
        )
        info.add_metric([str(cache.recurrent_slots), str(cache.recurrent_bytes_per_slot)], 1)
        yield info


def _spec_decode_series(
    stats: EngineStats, labels: list[str], values: list[str]
) -> Iterator[Metric]:
    """vLLM's speculative decoding counters, when the engine speculates."""
    per_pos = stats.spec_decode_num_accepted_tokens_per_pos
    if not per_pos:
        return
    totals = (
        ("drafts", "Number of spec decoding drafts.", stats.spec_decode_num_drafts),
        ("draft_tokens", "Number of draft tokens.", stats.spec_decode_num_draft_tokens),
        ("accepted_tokens", "Number of accepted tokens.", stats.spec_decode_num_accepted_tokens),
    )
    for name, doc, value in totals:
        family = CounterMetricFamily(f"vllm:spec_decode_num_{name}", doc, labels=labels)
        family.add_metric(values, value)
        yield family
    by_position = CounterMetricFamily(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        labels=[*labels, "position"],
    )
    for position, count in enumerate(per_pos):
        by_position.add_metric([*values, str(position)], count)
    yield by_position


def metrics_registry(
    stats: Callable[[], EngineStats], model_name: str, cache: CacheConfig
) -> CollectorRegistry:
    """A registry holding only the engine's series (one per app, never the global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(stats, model_name, cache))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of `registry`."""
    return generate_latest(registry)
