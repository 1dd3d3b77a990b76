"""`vllm-tvm bench`'s warm-up: before any level is timed, every concurrency of the sweep has
run once untimed with that many full-length requests in flight (a counting fake engine)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from vllm_tvm.benchmarking import sweep
from vllm_tvm.benchmarking.config import BenchConfig
from vllm_tvm.benchmarking.runner import bench_sampling_params, warm_up
from vllm_tvm.runtime.engine.metrics import EngineMetrics

CONCURRENCY = (1, 4, 2)
INPUT_LEN, OUTPUT_LEN = 10, 6


class CountingEngine:
    """Advances every request one token per step; counts requests in flight per step and
    notes, for each request, its id, prompt length and `max_tokens`."""

    def __init__(self) -> None:
        self.runner = SimpleNamespace(vocab_size=512)
        self.metrics = EngineMetrics()  # the sweep reads speculative counters per level
        self.max_model_len = 256
        self.tokenizer = None
        self.scheduler_config = SimpleNamespace(max_num_seqs=8, max_num_batched_tokens=64)
        self.cache_config = SimpleNamespace(
            block_size=16, num_blocks=64, enable_prefix_caching=True
        )
        self.live: dict[str, list] = {}
        self.added: list[tuple[str, int, int]] = []
        self.steps: list[tuple[str, int]] = []  # (first live request id, requests in flight)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.live)

    def reset_prefix_cache(self) -> bool:
        return True

    def add_request(self, request_id, prompt, params, output_kind="cumulative") -> str:
        self.added.append((request_id, len(prompt), params.max_tokens))
        self.live[request_id] = [prompt, params, 0, time.perf_counter()]
        return request_id

    def step(self) -> list:
        self.steps.append((next(iter(self.live)), len(self.live)))
        outputs = []
        for request_id, state in list(self.live.items()):
            prompt, params, made, arrival = state
            state[2] = made + 1
            if state[2] == params.max_tokens:
                del self.live[request_id]
                now = time.perf_counter()
                outputs.append(
                    SimpleNamespace(
                        request_id=request_id,
                        finished=True,
                        error=None,
                        prompt_token_ids=prompt,
                        outputs=[SimpleNamespace(finish_reason="length", token_ids=[0] * state[2])],
                        metrics=SimpleNamespace(
                            arrival_time=arrival,
                            time_to_first_token=0.0,
                            finished_time=now,
                            max_inter_token_seconds=0.0,
                        ),
                    )
                )
        return outputs


def test_warm_up_runs_all_its_prompts_at_once() -> None:
    engine = CountingEngine()
    warm_up(engine, [[1] * INPUT_LEN] * 3, bench_sampling_params(4))
    assert [count for _, count in engine.steps] == [3, 3, 3, 3]


def test_every_concurrency_is_warmed_before_the_first_timed_request(
    tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = CountingEngine()
    monkeypatch.setattr(sweep, "load_bench_engine", lambda config, artifact, blocks: engine)
    config = BenchConfig.from_options(
        tiny_model_dir("llama"),
        concurrency=CONCURRENCY,
        input_len=INPUT_LEN,
        output_len=OUTPUT_LEN,
        show_progress=False,
    )
    report = sweep.run_benchmark(config)
    timed = [i for i, (rid, _, _) in enumerate(engine.added) if not rid.startswith("warmup")]
    first_timed = timed[0]
    warmup = engine.added[:first_timed]
    assert not any(rid.startswith("warmup") for rid, _, _ in engine.added[first_timed:])
    # One warm-up batch per level, in the sweep's order, each that level's size, full length.
    batches: list[int] = []
    for rid, prompt_len, _ in warmup:
        assert prompt_len == INPUT_LEN
        if rid == "warmup-0":
            batches.append(0)
        batches[-1] += 1
    assert batches == list(CONCURRENCY)
    warm_steps = [count for rid, count in engine.steps if rid.startswith("warmup")]
    assert max(warm_steps) == max(CONCURRENCY) and set(CONCURRENCY) <= set(warm_steps)
    assert report.conditions["warmup"]["concurrency"] == list(CONCURRENCY)


def test_the_report_records_its_level_and_model_shape(tiny_model_dir, monkeypatch) -> None:
    engine = CountingEngine()
    monkeypatch.setattr(sweep, "load_bench_engine", lambda config, artifact, blocks: engine)
    config = BenchConfig.from_options(
        tiny_model_dir("llama"),
        concurrency=(2,),
        input_len=4,
        output_len=2,
        show_progress=False,
    )
    conditions = sweep.run_benchmark(config).conditions
    assert conditions["level"] == "engine"
    assert conditions["model_config"]["hidden_size"] == 64
