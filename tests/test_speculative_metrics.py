"""Speculative decoding's metrics under vLLM's names: counted per verified draft, exposed on
/metrics only when the engine speculates, and the mean acceptance length `bench` prints."""

from __future__ import annotations

from dataclasses import fields

from vllm_tvm.benchmarking.metrics import LevelMetrics, mean_acceptance_length
from vllm_tvm.benchmarking.report import table_row
from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.server.metrics import metrics_registry, render

CACHE = CacheConfig(block_size=32, num_blocks=8, enable_prefix_caching=True)


def _series(metrics: EngineMetrics) -> dict[str, float]:
    text = render(metrics_registry(metrics.snapshot, "m", CACHE)).decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:spec_decode")
    }


def test_drafts_count_their_tokens_and_accepted_positions() -> None:
    metrics = EngineMetrics()
    metrics.enable_spec_decode(3)
    before = metrics.snapshot()
    metrics.add_spec_decode(num_draft_tokens=3, num_accepted=2)
    metrics.add_spec_decode(num_draft_tokens=1, num_accepted=0)
    metrics.add_spec_decode(num_draft_tokens=3, num_accepted=3)
    stats = metrics.snapshot()
    assert (stats.spec_decode_num_drafts, stats.spec_decode_num_draft_tokens) == (3, 7)
    assert stats.spec_decode_num_accepted_tokens == 5
    assert stats.spec_decode_num_accepted_tokens_per_pos == [2, 2, 1]
    assert stats.mean_acceptance_length == 1 + 5 / 3
    assert mean_acceptance_length(before, stats) == 1 + 5 / 3
    assert mean_acceptance_length(stats, stats) is None
    series = _series(metrics)
    assert series['vllm:spec_decode_num_drafts_total{model_name="m"}'] == 3
    assert series['vllm:spec_decode_num_draft_tokens_total{model_name="m"}'] == 7
    assert series['vllm:spec_decode_num_accepted_tokens_total{model_name="m"}'] == 5
    key = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="2"}'
    assert series[key] == 1


def test_an_engine_that_does_not_speculate_exposes_no_spec_series() -> None:
    metrics = EngineMetrics()
    assert _series(metrics) == {} and metrics.snapshot().mean_acceptance_length is None


def _level(**values: float) -> LevelMetrics:
    """A level whose every timing is 1.0 ms but the `values` given."""
    timings = {f.name: 1.0 for f in fields(LevelMetrics)[8:] if f.name not in values}
    timings.pop("mean_acceptance_length", None)
    return LevelMetrics(1, 1, 2.0, 8, 16, 0.5, 8.0, 12.0, **timings, **values)


def test_the_bench_row_shows_the_mean_acceptance_length_when_there_is_one() -> None:
    level = _level()
    assert "acceptance" not in table_row(level)
    row = table_row(_level(mean_acceptance_length=2.5))
    assert row.endswith("mean acceptance length 2.50")


def test_a_speculative_bench_level_reports_its_mean_acceptance_length(tiny_model_dir) -> None:
    from vllm_tvm.benchmarking import BenchConfig, run_benchmark

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}
    config = BenchConfig.from_options(
        tiny_model_dir("llama"),
        concurrency=(1,),
        input_len=16,
        output_len=24,
        show_progress=False,
        speculative_config=spec,
    )
    report = run_benchmark(config)
    [level] = report.levels
    assert level.total_output_tokens == level.completed * 24
    assert level.mean_acceptance_length is not None and level.mean_acceptance_length >= 1
    assert report.conditions["speculative_config"]["num_speculative_tokens"] == 3
