"""Drive an `LLMEngine` at a fixed concurrency and time every request.

Why it exists: "throughput at concurrency C" means C requests in flight at all times: the
runner adds a new request in the same loop iteration that one finishes, so the engine's next
step already sees it (closed loop, like vLLM's `--max-concurrency`). Every request generates
exactly `output_len` tokens (ignore_eos), so levels differ only in how many run together.
Outputs are requested once per request (`final_only`), keeping per-step work out of the
measurement; the engine's own token times give TTFT and TPOT.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from vllm_tvm.benchmarking.metrics import RequestTiming
from vllm_tvm.runtime.engine.llm_engine import LLMEngine, PromptInput
from vllm_tvm.runtime.requests.outputs import RequestOutput
from vllm_tvm.runtime.sampling.params import SamplingParams

WARMUP_OUTPUT_LEN = 4


@dataclass(frozen=True)
class LevelRun:
    """What one level measured: each request's timing and the level's wall-clock seconds."""

    concurrency: int
    timings: list[RequestTiming]
    duration: float


def bench_sampling_params(output_len: int, temperature: float = 0.0) -> SamplingParams:
    """Exactly `output_len` tokens, EOS ignored, no detokenization; greedy at temperature 0.

    Requests carry no seed of their own (the engine's seed makes sampling reproducible), so
    sampling runs batched as in a server under load."""
    return SamplingParams(
        temperature=temperature,
        max_tokens=output_len,
        ignore_eos=True,
        detokenize=False,
    )


def warm_up(engine: LLMEngine, prompts: Sequence[PromptInput], params: SamplingParams) -> None:
    """Run `prompts` all at once to completion, untimed, with the prefix cache emptied first:
    the first-call costs of that many rows in flight (kernels, GEMM plans per row count,
    allocations of that size) are paid here rather than inside a measured level."""
    engine.reset_prefix_cache()
    for index, prompt in enumerate(prompts):
        engine.add_request(f"warmup-{index}", prompt, params, output_kind="final_only")
    while engine.has_unfinished:
        for output in engine.step():
            if output.finished:
                _check_complete(output, params)


def run_level(
    engine: LLMEngine,
    prompts: Sequence[PromptInput],
    concurrency: int,
    params: SamplingParams,
) -> LevelRun:
    """Run every prompt with `concurrency` requests in flight; the level's timings.

    The prefix cache is reset first, so a level does not reuse blocks of an earlier one.
    Raises RuntimeError when a request ends with anything but its full `max_tokens`.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    engine.reset_prefix_cache()
    pending = deque(enumerate(prompts))
    submitted: dict[str, float] = {}
    timings: list[RequestTiming] = []
    started = time.perf_counter()
    while pending or len(timings) < len(submitted):
        while pending and len(submitted) - len(timings) < concurrency:
            index, prompt = pending.popleft()
            request_id = f"c{concurrency}-{index}"
            submitted[request_id] = time.perf_counter()
            engine.add_request(request_id, prompt, params, output_kind="final_only")
        for output in engine.step():
            if output.finished:
                timings.append(_timing(output, params, submitted[output.request_id]))
    return LevelRun(concurrency, timings, time.perf_counter() - started)


def _timing(output: RequestOutput, params: SamplingParams, submitted: float) -> RequestTiming:
    _check_complete(output, params)
    metrics = output.metrics
    assert metrics.arrival_time is not None and metrics.finished_time is not None
    return RequestTiming(
        prompt_tokens=len(output.prompt_token_ids),
        output_tokens=len(output.outputs[0].token_ids),
        submitted=submitted,
        first_token=metrics.arrival_time + metrics.time_to_first_token,
        finished=metrics.finished_time,
        max_inter_token=metrics.max_inter_token_seconds,
    )


def _check_complete(output: RequestOutput, params: SamplingParams) -> None:
    completion = output.outputs[0]
    if completion.finish_reason != "length" or len(completion.token_ids) != params.max_tokens:
        raise RuntimeError(
            f"request {output.request_id} finished with reason '{completion.finish_reason}' "
            f"after {len(completion.token_ids)} of {params.max_tokens} tokens"
            + (f": {output.error}" if output.error else "")
        )
