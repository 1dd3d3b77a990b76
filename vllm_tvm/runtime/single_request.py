"""One request from prompt to finish on a `ModelRunner`: prefill, then decode until a stop.

This is the sequential path used by `generate` and `LLM.generate` until the batching engine
takes over; it already has the full per-request machinery (sampler contexts, incremental
detokenizer, vLLM stop rules) so the engine only adds scheduling around it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from vllm_tvm.runtime.detokenizer import IncrementalDetokenizer
from vllm_tvm.runtime.model_runner import ModelRunner
from vllm_tvm.runtime.outputs import CompletionOutput, RequestMetrics
from vllm_tvm.runtime.sampler import Sampler, SamplingContext
from vllm_tvm.runtime.sampling_params import SamplingParams
from vllm_tvm.runtime.stop_checker import StopChecker
from vllm_tvm.runtime.tokenization import Tokenizer


class PromptTooLongError(ValueError):
    """A prompt at or past the model's length limit."""


@dataclass
class StreamDelta:
    """What one step adds: the token, its stable text, and the finish once finished."""

    token_id: int
    text: str
    finished: bool
    finish_reason: str | None = None
    stop_reason: int | str | None = None


def check_prompt_length(prompt_len: int, max_model_len: int) -> None:
    """Refuse a prompt that leaves no room to generate (vLLM's _validate_prompt_len)."""
    if prompt_len >= max_model_len:
        raise PromptTooLongError(
            f"The prompt (length {prompt_len}) is longer than or equal to the maximum model "
            f"length of {max_model_len}. Make sure that `max_model_len` is no smaller than "
            "the number of text tokens plus one."
        )
    if prompt_len == 0:
        raise PromptTooLongError("The prompt is empty: at least one token is needed.")


def stream_request(
    runner: ModelRunner,
    tokenizer: Tokenizer,
    sampler: Sampler,
    prompt_token_ids: list[int],
    params: SamplingParams,
    eos_token_ids: list[int],
    metrics: RequestMetrics,
    seq_id: int = 0,
) -> Iterator[StreamDelta]:
    """Generate for one prompt, yielding a delta per sampled token; frees its KV on exit."""
    check_prompt_length(len(prompt_token_ids), runner.max_model_len)
    context = SamplingContext.for_request(
        params, prompt_token_ids, encode=lambda text: tokenizer.encode(text, False)
    )
    decoder = IncrementalDetokenizer(
        tokenizer,
        skip_special_tokens=params.skip_special_tokens,
        prompt_token_ids=prompt_token_ids,
    )
    stops = StopChecker(
        prompt_len=len(prompt_token_ids),
        max_model_len=runner.max_model_len,
        max_tokens=params.max_tokens,
        min_tokens=params.min_tokens,
        stop=params.stop,
        stop_token_ids=params.stop_token_ids,
        eos_token_ids=eos_token_ids,
        ignore_eos=params.ignore_eos,
        include_stop_str_in_output=params.include_stop_str_in_output,
    )
    chunk = runner.kv_config.prefill_chunk_size
    runner.kv_cache.add_sequence(seq_id)
    try:
        started = time.perf_counter()
        for begin in range(0, len(prompt_token_ids), chunk):
            logits = runner.prefill([seq_id], [prompt_token_ids[begin : begin + chunk]])
        metrics.prefill_seconds = time.perf_counter() - started
        decode_started = None
        while True:
            token = int(sampler.sample(logits, [context]).token_ids[0])
            context.output_token_ids.append(token)
            step = stops.step(token, decoder)
            if decode_started is None:
                metrics.time_to_first_token = time.perf_counter() - started
            yield StreamDelta(token, step.text, step.finished, step.finish_reason, step.stop_reason)
            if step.finished:
                break
            if decode_started is None:
                decode_started = time.perf_counter()
            logits = runner.decode([seq_id], [token])
            metrics.decode_tokens += 1
        if decode_started is not None:
            metrics.decode_seconds = time.perf_counter() - decode_started
    finally:
        runner.kv_cache.remove_sequence(seq_id)


def run_request(
    runner: ModelRunner,
    tokenizer: Tokenizer,
    sampler: Sampler,
    prompt_token_ids: list[int],
    params: SamplingParams,
    eos_token_ids: list[int],
    index: int = 0,
) -> tuple[CompletionOutput, RequestMetrics]:
    """Generate to the finish; the completion and its timings."""
    metrics = RequestMetrics()
    tokens: list[int] = []
    text = ""
    last = None
    for delta in stream_request(
        runner, tokenizer, sampler, prompt_token_ids, params, eos_token_ids, metrics
    ):
        tokens.append(delta.token_id)
        text += delta.text
        last = delta
    assert last is not None
    output = CompletionOutput(index, text, tokens, last.finish_reason, last.stop_reason)
    return output, metrics
