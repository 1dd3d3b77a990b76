"""Decode-only throughput through the engine, taken the way vLLM's figure is taken.

Why it exists: vLLM's "decode-only bB" (benchmarks/peers/run_vllm.py) is engine-level: whole
`generate` calls of B prompts, B·(N-1) / (t(N out) - t(1 out)), median over repeats, so
prefill and per-call costs cancel out. Timing forward calls of the model runner alone leaves
out the scheduler, block tables, sampling and stop rules, and is not the same measurement.
This module times `LLMEngine` the same way, and also the steps after every prompt has its
first token (no prefill left in them: a second view of the same run).

Warm-up covers every row count the timed calls will run: before any clock starts, each
batch's calls (N out and 1 out) run once untimed with their own prompts, so first-shape
costs (GEMM algorithm choice per row count, first allocations of that size) stay untimed.
Each run's prompts are new random ids and the prefix cache is emptied first: no reuse.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from vllm_tvm.benchmarking.runner import bench_sampling_params
from vllm_tvm.benchmarking.workload import random_prompt_ids
from vllm_tvm.runtime.engine.llm_engine import LLMEngine


@dataclass(frozen=True)
class BatchRun:
    """One run of `batch` prompts to completion: whole seconds, and the steps after every
    prompt had its first token (seconds and the tokens they generated)."""

    batch: int
    output_len: int
    seconds: float
    after_prefill_seconds: float
    after_prefill_tokens: int


@dataclass(frozen=True)
class DecodeOnly:
    """The timed runs of one batch size: `full` with `output_len` tokens, `first` with 1."""

    batch: int
    input_len: int
    output_len: int
    full: list[BatchRun]
    first: list[BatchRun]

    @property
    def tok_s(self) -> float:
        """B·(N-1) / (median t(N out) - median t(1 out)): vLLM's decode-only definition."""
        full = statistics.median(run.seconds for run in self.full)
        first = statistics.median(run.seconds for run in self.first)
        return self.batch * (self.output_len - 1) / (full - first)

    @property
    def aggregate_tok_s(self) -> float:
        """B·N / median t(N out): output tokens per second of the whole run, prefill
        included (vLLM's aggregate, benchmarks/peers/run_vllm.py)."""
        return self.batch * self.output_len / statistics.median(run.seconds for run in self.full)

    @property
    def after_prefill_tok_s(self) -> float:
        """Median over the full runs of tokens / seconds of the steps after all prefills."""
        return statistics.median(
            run.after_prefill_tokens / run.after_prefill_seconds for run in self.full
        )


class PromptSource:
    """New random prompts for every run (a fresh seed each time), never reused."""

    def __init__(self, vocab_size: int, input_len: int, seed: int) -> None:
        self.vocab_size, self.input_len, self.seed = vocab_size, input_len, seed

    def take(self, count: int) -> list[list[int]]:
        self.seed += 1
        return random_prompt_ids(count, self.input_len, self.vocab_size, self.seed)


def run_batch(engine: LLMEngine, prompts: Sequence[list[int]], output_len: int) -> BatchRun:
    """Run every prompt at once to `output_len` tokens; the wall times of the run.

    Raises RuntimeError when a request ends with anything but `output_len` tokens."""
    params = bench_sampling_params(output_len)
    engine.reset_prefix_cache()
    started = time.perf_counter()
    for index, prompt in enumerate(prompts):
        engine.add_request(f"decode-only-{index}", prompt, params, output_kind="delta")
    generated = {f"decode-only-{index}": 0 for index in range(len(prompts))}
    prefilled_at, tokens_by_then = None, 0
    while engine.has_unfinished:
        for output in engine.step():
            generated[output.request_id] += len(output.outputs[0].token_ids)
            reason = output.outputs[0].finish_reason
            if output.finished and (
                reason != "length" or generated[output.request_id] != output_len
            ):
                raise RuntimeError(
                    f"request {output.request_id} finished with reason '{reason}' after "
                    f"{generated[output.request_id]} of {output_len} tokens"
                )
        if prefilled_at is None and all(generated.values()):
            prefilled_at, tokens_by_then = time.perf_counter(), sum(generated.values())
    ended = time.perf_counter()
    assert prefilled_at is not None
    return BatchRun(
        batch=len(prompts),
        output_len=output_len,
        seconds=ended - started,
        after_prefill_seconds=ended - prefilled_at,
        after_prefill_tokens=sum(generated.values()) - tokens_by_then,
    )


def measure_decode_only(
    engine: LLMEngine,
    batches: Sequence[int],
    input_len: int,
    output_len: int,
    repeats: int = 2,
    seed: int = 0,
) -> list[DecodeOnly]:
    """Warm up with every batch's calls, then time each batch `repeats` times (N out, 1 out).

    Raises ValueError for a batch below 1, an output below 2 tokens or no repeat."""
    if output_len < 2:
        raise ValueError(f"output_len must be >= 2 for a decode step, got {output_len}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for batch in batches:
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
    prompts = PromptSource(engine.runner.vocab_size, input_len, seed)
    for batch in batches:
        run_batch(engine, prompts.take(batch), output_len)
        run_batch(engine, prompts.take(batch), 1)
    results = []
    for batch in batches:
        full = [run_batch(engine, prompts.take(batch), output_len) for _ in range(repeats)]
        first = [run_batch(engine, prompts.take(batch), 1) for _ in range(repeats)]
        results.append(DecodeOnly(batch, input_len, output_len, full, first))
    return results


def measure_ttft(engine: LLMEngine, input_len: int, requests: int, seed: int = 0) -> list[float]:
    """Seconds from submitting a lone `input_len`-token prompt to its one token, `requests`
    times after one untimed run: vLLM's `ttft_1024_ms_median` (run_vllm.py times a whole
    `generate` call of one prompt for one token) at the same level.

    Raises ValueError for fewer than one request."""
    if requests < 1:
        raise ValueError(f"requests must be >= 1, got {requests}")
    prompts = PromptSource(engine.runner.vocab_size, input_len, seed)
    run_batch(engine, prompts.take(1), 1)
    return [run_batch(engine, prompts.take(1), 1).seconds for _ in range(requests)]
