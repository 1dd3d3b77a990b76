"""`LLMEngine`: requests in, one batched step at a time, `RequestOutput`s out.

Why it exists: this is the loop every front end shares (`LLM.generate`, `generate --stream`,
the async engine behind the server; `from_args` builds one, see args.py).
`add_request` validates and queues; each `step()` asks the scheduler for a batch, runs it as
at most two forwards (one ragged prefill for the sequences computing several tokens or the
last of a prompt, one decode for those computing the single token they sampled last step),
samples every sequence whose tokens are all computed (on the device when it needs nothing
only the host sampler does, see sampling/device_sampling.py; otherwise from its logits row copied to
the host), applies the stop rules, frees what finished, and returns the outputs.

An engine built without a tokenizer (`EngineArgs.skip_tokenizer_init`, for benchmarks)
takes token-id prompts only and produces no text, as vLLM does; text prompts and stop
strings, which cannot work without one, are refused when added.

A request that fails (its sampling masks the whole vocabulary, its forward raises) finishes
with reason "error" and frees its blocks; the other requests carry on. Admission follows
vLLM: a prompt at or past `max_model_len` is refused when added, naming both lengths, so
nothing waits forever.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from vllm_tvm.runtime.engine.args import EngineArgs, load_engine_parts
from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.engine.outputs import RequestOutput
from vllm_tvm.runtime.engine.scheduler import ScheduledSequence, Scheduler, SchedulerConfig
from vllm_tvm.runtime.engine.sequence import (
    FINISH_ABORT,
    FINISH_ERROR,
    EngineSequence,
    NoTextDecoder,
    OutputKind,
    Request,
)
from vllm_tvm.runtime.engine.stop_checker import StopChecker
from vllm_tvm.runtime.kv.block_manager import BlockManager
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.model.device_logits import DeviceLogits
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.sampling.device_sampling import (
    device_sampling_enabled,
    needs_host_row,
    sample_rows,
)
from vllm_tvm.runtime.sampling.params import LogprobsMode, SamplingParams
from vllm_tvm.runtime.sampling.sampler import (
    Sampler,
    SamplingContext,
    TokenLogprobs,
    prompt_logprobs,
)
from vllm_tvm.runtime.tokenization import Tokenizer
from vllm_tvm.runtime.tokenization.detokenizer import DecodeTables, IncrementalDetokenizer

logger = logging.getLogger(__name__)

PromptInput = str | list[int]
LogitsHook = Callable[[list[EngineSequence], np.ndarray], None]
Ready = tuple[EngineSequence, DeviceLogits, int]
"""A sequence that samples this step, the forward's logits and its row in them."""


class PromptTooLongError(ValueError):
    """A prompt at or past the serving length (or an empty one): it can never run."""


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


class LLMEngine:
    """The synchronous engine: `add_request`, then `step()` until `has_unfinished` is False."""

    def __init__(
        self,
        runner: ModelRunner,
        tokenizer: Tokenizer | None,
        eos_token_ids: list[int],
        cache_config: CacheConfig,
        scheduler_config: SchedulerConfig,
        max_model_len: int,
        logprobs_mode: LogprobsMode = "raw_logprobs",
        seed: int | None = None,
    ) -> None:
        """Drive `runner`, whose KV cache must hold `cache_config`'s pool, `max_num_seqs`
        sequences per forward and a prefill chunk of the step's token budget. `tokenizer`
        None: token-id prompts only, no text in the outputs."""
        kv = runner.kv_config
        if kv.prefill_chunk_size < scheduler_config.max_num_batched_tokens:
            raise ValueError(
                f"max_num_batched_tokens {scheduler_config.max_num_batched_tokens} exceeds the "
                f"KV cache's prefill chunk of {kv.prefill_chunk_size} tokens"
            )
        if kv.max_batch_size < scheduler_config.max_num_seqs:
            raise ValueError(
                f"max_num_seqs {scheduler_config.max_num_seqs} exceeds the KV cache's batch "
                f"size {kv.max_batch_size}"
            )
        if kv.max_total_seq_len < cache_config.num_tokens:
            raise ValueError(
                f"the KV pool of {cache_config.num_tokens} tokens does not fit the KV cache's "
                f"{kv.max_total_seq_len}"
            )
        self.runner = runner
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.cache_config = cache_config
        self.scheduler_config = scheduler_config
        self.max_model_len = max_model_len
        self.metrics = EngineMetrics()
        self.block_manager = BlockManager(runner.kv_cache, cache_config)
        self.scheduler = Scheduler(scheduler_config, self.block_manager, self.metrics)
        self.sampler = Sampler(logprobs_mode=logprobs_mode, eos_token_ids=eos_token_ids, seed=seed)
        self._decode_tables = (
            DecodeTables.from_tokenizer(tokenizer) if tokenizer is not None else None
        )
        self._requests: dict[str, Request] = {}
        self._pending: list[RequestOutput] = []
        self._request_counter = itertools.count()
        self.logits_hooks: list[LogitsHook] = []
        """Called as hook(sequences, logits) before each host sampling, to mask rows in place
        (structured output registers one). The rows of sequences that sample on the device
        are not passed: a hook with a `constrains(seq) -> bool` method keeps the sequences
        it answers True for on the host; any other hook keeps every row on the host."""
        self.device_sampling = device_sampling_enabled()
        """Whether rows that need nothing host-only are sampled on the device (default on;
        `VLLM_TVM_DEVICE_SAMPLING=0` turns it off; see sampling/device_sampling.py)."""

    @classmethod
    def from_args(cls, args: EngineArgs) -> LLMEngine:
        """Load the model, tokenizer and stop ids, size the KV pool and build the engine."""
        parts = load_engine_parts(args)
        return cls(
            parts.runner,
            parts.tokenizer,
            parts.eos_token_ids,
            parts.cache_config,
            parts.scheduler_config,
            parts.max_model_len,
            args.logprobs_mode,
            args.seed,
        )

    # ---- requests ----

    @property
    def has_unfinished(self) -> bool:
        """Whether a request is queued or running, or an output is still to be returned."""
        return self.scheduler.has_unfinished or bool(self._pending)

    def make_request(
        self,
        prompt: PromptInput,
        params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        output_kind: OutputKind = "cumulative",
    ) -> Request:
        """Validate and tokenize a request without queuing it (safe from any thread).

        Raises PromptTooLongError for a prompt at or past `max_model_len` (or empty) and
        ValueError for parameters the model cannot honour (or that need a missing tokenizer).
        """
        if self.tokenizer is None:
            _check_without_tokenizer(prompt, params)
        text, prompt_ids = (
            (prompt, self.tokenizer.encode(prompt))
            if isinstance(prompt, str)
            else (None, [int(token) for token in prompt])
        )
        check_prompt_length(len(prompt_ids), self.max_model_len)
        out_of_vocab = [t for t in prompt_ids if not 0 <= t < self.runner.vocab_size]
        if out_of_vocab:
            raise ValueError(
                f"prompt token ids {out_of_vocab[:8]} are outside the vocabulary "
                f"[0, {self.runner.vocab_size})"
            )
        params.verify_for_vocab(self.runner.vocab_size)
        if request_id is None:
            request_id = str(next(self._request_counter))
        arrival = time.perf_counter()
        seqs = [
            self._make_sequence(request_id, index, prompt_ids, params, arrival, priority)
            for index in range(params.n)
        ]
        return Request(request_id, text, prompt_ids, seqs, output_kind, arrival)

    def _make_sequence(
        self,
        request_id: str,
        index: int,
        prompt_ids: list[int],
        params: SamplingParams,
        arrival: float,
        priority: int,
    ) -> EngineSequence:
        if params.n > 1:
            params = replace(
                params,
                n=1,
                seed=None if params.seed is None else params.seed + index,
                prompt_logprobs=params.prompt_logprobs if index == 0 else None,
            )
        tokenizer = self.tokenizer
        context = SamplingContext.for_request(
            params,
            prompt_ids,
            encode=None if tokenizer is None else lambda text: tokenizer.encode(text, False),
        )
        stops = StopChecker(
            prompt_len=len(prompt_ids),
            max_model_len=self.max_model_len,
            max_tokens=params.max_tokens,
            min_tokens=params.min_tokens,
            stop=params.stop,
            stop_token_ids=params.stop_token_ids,
            eos_token_ids=self.eos_token_ids,
            ignore_eos=params.ignore_eos,
            include_stop_str_in_output=params.include_stop_str_in_output,
        )
        decoder = (
            IncrementalDetokenizer(
                tokenizer,
                skip_special_tokens=params.skip_special_tokens,
                prompt_token_ids=prompt_ids,
                tables=self._decode_tables,
            )
            if params.detokenize and tokenizer is not None
            else NoTextDecoder()
        )
        return EngineSequence(
            request_id, index, params, prompt_ids, context, stops, decoder, arrival, priority
        )

    def add(self, request: Request) -> None:
        """Queue a request made by `make_request`."""
        if request.request_id in self._requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        self._requests[request.request_id] = request
        for seq in request.seqs:
            self.scheduler.add(seq)

    def add_request(
        self,
        request_id: str | None,
        prompt: PromptInput,
        params: SamplingParams,
        priority: int = 0,
        output_kind: OutputKind = "cumulative",
    ) -> str:
        """Validate and queue a request (text or token ids); its id (made up when None)."""
        request = self.make_request(prompt, params, request_id, priority, output_kind)
        self.add(request)
        return request.request_id

    def abort_request(self, request_id: str) -> bool:
        """Stop a request now: its sequences finish with "abort", their blocks are freed and
        the next `step()` returns its final output. False when no such request is live."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return False
        for seq in request.seqs:
            if not seq.is_finished:
                self._end(seq, FINISH_ABORT)
        output = request.make_output()
        if output is not None:
            self._pending.append(output)
        return True

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block (blocks in use stay, but are no longer shared)."""
        self.block_manager.reset_prefix_cache()
        return True

    # ---- the step ----

    def step(self) -> list[RequestOutput]:
        """Run one batch; the outputs of the requests it advanced, finished or aborted."""
        outputs, self._pending = self._pending, []
        batch = self.scheduler.schedule()
        touched: dict[str, Request] = {}
        if batch.scheduled:
            now = time.perf_counter()
            for item in batch.scheduled:
                if item.seq.first_scheduled_time is None:
                    item.seq.first_scheduled_time = now
            try:
                ready = self._forward(batch.scheduled)
            except Exception as err:  # the batch's KV is unusable: fail its sequences
                logger.exception("forward failed; failing %d sequences", len(batch.scheduled))
                for item in batch.scheduled:
                    self._end(item.seq, FINISH_ERROR, error=f"forward failed: {err}")
                    touched[item.seq.request_id] = self._requests[item.seq.request_id]
            else:
                for item in batch.scheduled:
                    self.block_manager.cache_full_blocks(item.seq)
                self._sample(ready, touched)
        self.metrics.set_gauges(
            len(self.scheduler.running), len(self.scheduler.waiting), self.block_manager.usage
        )
        for request in touched.values():
            output = request.make_output()
            if output is not None:
                outputs.append(output)
            if request.is_finished:
                self._requests.pop(request.request_id, None)
        return outputs

    def _forward(self, scheduled: list[ScheduledSequence]) -> list[Ready]:
        """Compute the scheduled tokens; (sequence, logits, row) for each sequence whose
        tokens are now all computed (it samples next). Prompt logprobs are gathered here."""
        decodes = [item for item in scheduled if _is_decode(item)]
        prefills = [item for item in scheduled if not _is_decode(item)]
        ready: list[Ready] = []
        if prefills:
            ready.extend(self._prefill(prefills))
        if decodes:
            seqs = [item.seq for item in decodes]
            logits = self.runner.decode_logits(
                [s.kv_id for s in seqs], [s.token_ids[-1] for s in seqs]
            )
            for row, seq in enumerate(seqs):
                seq.num_computed_tokens += 1
                ready.append((seq, logits, row))
        return ready

    def _prefill(self, items: list[ScheduledSequence]) -> list[Ready]:
        chunks, positions, plans = [], [], []
        offset = 0
        for item in items:
            seq, start, count = item.seq, item.seq.num_computed_tokens, item.num_tokens
            chunks.append(seq.token_ids[start : start + count])
            first_row = len(positions)
            if seq.wants_prompt_logprobs:
                positions.extend(range(offset, offset + count))
            elif start + count == seq.num_tokens:
                positions.append(offset + count - 1)
            plans.append((seq, start, count, first_row, len(positions)))
            offset += count
        if not positions:  # no chunk finishes a prompt: logits are not needed
            positions.append(offset - 1)
        logits = self.runner.prefill_logits([item.seq.kv_id for item in items], chunks, positions)
        ready: list[Ready] = []
        for seq, start, count, first_row, end_row in plans:
            if seq.wants_prompt_logprobs:
                self._add_prompt_logprobs(seq, logits.numpy()[first_row:end_row], start)
            seq.num_computed_tokens += count
            if seq.num_computed_tokens == seq.num_tokens:
                ready.append((seq, logits, end_row - 1))
        return ready

    def _add_prompt_logprobs(self, seq: EngineSequence, rows: np.ndarray, start: int) -> None:
        assert seq.prompt_logprobs is not None and seq.params.prompt_logprobs is not None
        entries = prompt_logprobs(rows, seq.prompt_token_ids, seq.params.prompt_logprobs, start)
        already = len(seq.prompt_logprobs) - (start + 1)  # entries a preempted run kept
        seq.prompt_logprobs.extend(entries[max(already, 0) :])

    def _samples_on_device(self, seq: EngineSequence, logits: DeviceLogits) -> bool:
        """Whether `seq` takes its next token from the device (sampling/device_sampling.py lists
        what keeps a row on the host)."""
        return (
            self.device_sampling
            and (seq.params.greedy or logits.can_sample)
            and not needs_host_row(seq.sampling)
            and not self._hook_may_mask(seq)
        )

    def _hook_may_mask(self, seq: EngineSequence) -> bool:
        """Whether a logits hook may change `seq`'s row: a hook with `constrains(seq)` says
        so itself, any other one may mask any row."""
        for hook in self.logits_hooks:
            constrains = getattr(hook, "constrains", None)
            if not callable(constrains) or constrains(seq):
                return True
        return False

    def _sample(self, ready: list[Ready], touched: dict[str, Request]) -> None:
        if not ready:
            return
        chosen: list[tuple[int, TokenLogprobs | None] | None] = [None] * len(ready)
        on_device = [self._samples_on_device(seq, logits) for seq, logits, _ in ready]
        self._sample_on_device([i for i, device in enumerate(on_device) if device], ready, chosen)
        host = [i for i, device in enumerate(on_device) if not device]
        if host:
            self._sample_on_host(host, ready, chosen, touched)
        now = time.perf_counter()
        generated = 0
        for (seq, _, _), outcome in zip(ready, chosen, strict=True):
            if outcome is None:  # its sampling failed and ended it
                continue
            first = seq.first_token_time is None
            if first:
                self.metrics.add_first_token(now - seq.arrival_time)
                self.metrics.add_tokens(prompt=seq.num_prompt_tokens, generated=0)
            generated += 1
            touched[seq.request_id] = self._requests[seq.request_id]
            try:
                seq.append_token(outcome[0], outcome[1], now)
            except Exception as err:  # e.g. the detokenizer: this request alone fails
                self._end(seq, FINISH_ERROR, error=f"output processing failed: {err}")
            else:
                if seq.is_finished:
                    self._release(seq)
        self.metrics.add_tokens(prompt=0, generated=generated)

    def _sample_on_device(
        self,
        indices: list[int],
        ready: list[Ready],
        chosen: list[tuple[int, TokenLogprobs | None] | None],
    ) -> None:
        """Tokens of `ready[i]` for i in `indices`, one device call per logits tensor."""
        groups: dict[int, tuple[DeviceLogits, list[int]]] = {}
        for index in indices:
            logits = ready[index][1]
            groups.setdefault(id(logits), (logits, []))[1].append(index)
        for logits, members in groups.values():
            tokens = sample_rows(
                logits,
                [ready[i][2] for i in members],
                [ready[i][0].sampling for i in members],
                self.sampler,
            )
            for index, token in zip(members, tokens, strict=True):
                chosen[index] = (int(token), None)

    def _sample_on_host(
        self,
        indices: list[int],
        ready: list[Ready],
        chosen: list[tuple[int, TokenLogprobs | None] | None],
        touched: dict[str, Request],
    ) -> None:
        """Tokens of `ready[i]` for i in `indices` by the host sampler, after the logits
        hooks; a row that cannot be sampled ends its sequence with an error."""
        seqs = [ready[i][0] for i in indices]
        logits = np.stack([ready[i][1].numpy()[ready[i][2]] for i in indices])
        for hook in self.logits_hooks:
            hook(seqs, logits)
        try:
            results = [self.sampler.sample(logits, [s.sampling for s in seqs])]
            rows = [list(range(len(seqs)))]
        except ValueError:  # some row cannot be sampled: isolate it
            results, rows = [], []
            for index, seq in enumerate(seqs):
                try:
                    results.append(self.sampler.sample(logits[index : index + 1], [seq.sampling]))
                    rows.append([index])
                except ValueError as err:
                    self._end(seq, FINISH_ERROR, error=str(err))
                    touched[seq.request_id] = self._requests[seq.request_id]
        for result, members in zip(results, rows, strict=True):
            for position, index in enumerate(members):
                chosen[indices[index]] = (
                    int(result.token_ids[position]),
                    result.logprobs[position],
                )

    def _end(self, seq: EngineSequence, reason: str, error: str | None = None) -> None:
        """Finish `seq` early (abort or error) and free its blocks."""
        seq.finish(reason, error=error)
        self._release(seq)

    def _release(self, seq: EngineSequence) -> None:
        self.scheduler.remove(seq)
        assert seq.finish_reason is not None and seq.finished_time is not None
        decode = (
            seq.last_token_time - seq.first_token_time
            if seq.first_token_time is not None and seq.last_token_time is not None
            else 0.0
        )
        self.metrics.add_finished(
            seq.finish_reason,
            seq.finished_time - seq.arrival_time,
            decode,
            len(seq.output_token_ids),
        )


def _check_without_tokenizer(prompt: PromptInput, params: SamplingParams) -> None:
    """Refuse what an engine without a tokenizer cannot honour: text in, stop strings."""
    if isinstance(prompt, str):
        raise ValueError(
            "a text prompt needs a tokenizer, but this engine was built with "
            "skip_tokenizer_init: pass the prompt as token ids"
        )
    if params.stop:
        raise ValueError(
            f"stop strings {params.stop!r} need a tokenizer, but this engine was built with "
            "skip_tokenizer_init: use stop_token_ids"
        )


def _is_decode(item: ScheduledSequence) -> bool:
    """One token, the last one sampled, after tokens already in the cache: the decode path."""
    seq = item.seq
    return (
        item.num_tokens == 1
        and 0 < seq.num_computed_tokens == seq.num_tokens - 1
        and not seq.wants_prompt_logprobs
    )


def generate_all(
    engine: LLMEngine,
    prompts: Sequence[PromptInput],
    params: Sequence[SamplingParams],
    priorities: Sequence[int] | None = None,
) -> list[RequestOutput]:
    """Run requests to completion on `engine`, batched; outputs in prompt order.

    Every request is validated before any is queued, so a bad one refuses the whole call.
    """
    priorities = priorities if priorities is not None else [0] * len(prompts)
    requests = [
        engine.make_request(prompt, param, None, priority, "final_only")
        for prompt, param, priority in zip(prompts, params, priorities, strict=True)
    ]
    for request in requests:
        engine.add(request)
    finished: dict[str, RequestOutput] = {}
    while len(finished) < len(requests):
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = output
    return [finished[request.request_id] for request in requests]
