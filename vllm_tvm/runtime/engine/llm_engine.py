"""`LLMEngine`: requests in, one batched step at a time, `RequestOutput`s out.

Why it exists: this is the loop every front end shares (`LLM.generate`, `generate --stream`,
the async engine behind the server; `from_args` builds one, see args.py). Each `step()`:
the scheduler picks the batch (scheduler.py), the batch becomes ONE forward (decode rows
alone: the compiled decode; anything else: one ragged prefill, see model/batch.py), every
sequence whose tokens are all computed samples its next token (on the device when it can,
see sampling/dispatch.py), the stop rules run, what finished is freed, and the outputs of
the requests the step touched are returned. Requests are checked and built in intake.py.

An engine built without a tokenizer (`EngineArgs.skip_tokenizer_init`, for benchmarks)
takes token-id prompts only and produces no text, as vLLM does; text prompts and stop
strings, which cannot work without one, are refused when added.

A request that fails (its sampling masks the whole vocabulary, its forward or its sampling
raises) finishes with reason "error" and frees its blocks; the other requests carry on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.builder import load_engine_parts
from vllm_tvm.runtime.engine.intake import PromptInput, RequestIntake
from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.engine.outputs import RequestOutput
from vllm_tvm.runtime.engine.scheduler import ScheduledSequence, Scheduler, SchedulerConfig
from vllm_tvm.runtime.engine.sequence import (
    FINISH_ABORT,
    FINISH_ERROR,
    EngineSequence,
    OutputKind,
    Request,
)
from vllm_tvm.runtime.kv.block_manager import BlockManager
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.model.batch import ForwardBatch, ForwardRunner, prepare_batch, run_forward
from vllm_tvm.runtime.model.device_logits import DeviceLogits
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.sampling.device_sampling import device_sampling_enabled
from vllm_tvm.runtime.sampling.dispatch import (
    LogitsHook,
    SamplingDispatch,
    StepSamples,
    sampling_fault,
)
from vllm_tvm.runtime.sampling.params import LogprobsMode, SamplingParams
from vllm_tvm.runtime.sampling.sampler import Sampler, prompt_logprobs
from vllm_tvm.runtime.speculative.config import SpeculativeConfig
from vllm_tvm.runtime.speculative.head_proposer import HeadProposer
from vllm_tvm.runtime.speculative.proposers import proposer_for
from vllm_tvm.runtime.speculative.speculator import Speculator, VerifyStep
from vllm_tvm.runtime.speculative.target_hidden import HiddenCapturingRunner
from vllm_tvm.runtime.tokenization import Tokenizer

logger = logging.getLogger(__name__)


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
        speculative_config: SpeculativeConfig | None = None,
        draft_runner: ModelRunner | None = None,
    ) -> None:
        """Drive `runner`, whose KV cache must hold `cache_config`'s pool, `max_num_seqs`
        sequences per forward and a prefill chunk of the step's token budget. `tokenizer`
        None: token-id prompts only, no text in the outputs. `speculative_config` None:
        every decode step computes one token per sequence; methods `draft_model`, `eagle` and
        `mtp` draft with `draft_runner` (a draft model, an EAGLE head, an MTP layer)."""
        runner.kv_config.check_holds(
            scheduler_config.max_num_seqs,
            scheduler_config.max_num_batched_tokens,
            cache_config.num_tokens,
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
        self.intake = RequestIntake(tokenizer, eos_token_ids, max_model_len, runner.vocab_size)
        self.sampler = Sampler(logprobs_mode=logprobs_mode, eos_token_ids=eos_token_ids, seed=seed)
        self.sampling = SamplingDispatch(self.sampler, device_sampling_enabled())
        self.speculator: Speculator | None = None
        self._forward_runner: ForwardRunner = runner
        if speculative_config is not None:
            self.metrics.enable_spec_decode(speculative_config.num_speculative_tokens)
            draft = proposer_for(speculative_config, runner, draft_runner, self.sampler)
            if isinstance(draft, HeadProposer):
                self._forward_runner = HiddenCapturingRunner(runner, draft.store)
            self.speculator = Speculator(
                speculative_config,
                self.block_manager,
                self.sampling,
                self.metrics,
                scheduler_config.max_num_batched_tokens,
                max_model_len,
                draft,
            )
        self._requests: dict[str, Request] = {}
        self._pending: list[RequestOutput] = []

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
            args.speculative_config,
            parts.draft_runner,
        )

    @property
    def logits_hooks(self) -> list[LogitsHook]:
        """Called as hook(sequences, logits) before each host sampling, to mask rows in place
        (structured output registers one); see sampling/dispatch.py for which rows it sees."""
        return self.sampling.logits_hooks

    @property
    def device_sampling(self) -> bool:
        """Whether rows that need nothing host-only are sampled on the device (default on;
        `VLLM_TVM_DEVICE_SAMPLING=0` turns it off; see sampling/device_sampling.py)."""
        return self.sampling.device_sampling

    @device_sampling.setter
    def device_sampling(self, enabled: bool) -> None:
        self.sampling.device_sampling = enabled

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
        """Validate and tokenize a request without queuing it (safe from any thread); see
        `RequestIntake.make_request` for what is refused."""
        return self.intake.make_request(prompt, params, request_id, priority, output_kind)

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

    def abort_all(self) -> int:
        """Abort every live request (see `abort_request`); how many there were."""
        request_ids = list(self._requests)
        for request_id in request_ids:
            self.abort_request(request_id)
        return len(request_ids)

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block (blocks in use stay, but are no longer shared)."""
        self.block_manager.reset_prefix_cache()
        return True

    # ---- the step ----

    def step(self) -> list[RequestOutput]:
        """Run one batch; the outputs of the requests it advanced, finished or aborted."""
        outputs, self._pending = self._pending, []
        scheduled = self.scheduler.schedule().scheduled
        touched: list[EngineSequence] = []
        if scheduled:
            started = time.perf_counter()
            touched = self._run(scheduled)
            self.scheduler.record_step(scheduled, time.perf_counter() - started)
        self.metrics.set_gauges(
            len(self.scheduler.running), len(self.scheduler.waiting), self.block_manager.usage
        )
        requests = self._requests
        for request_id in dict.fromkeys(seq.request_id for seq in touched):
            request = requests[request_id]
            output = request.make_output()
            if output is None:
                finished = request.is_finished
            else:
                outputs.append(output)
                finished = output.finished
            if finished:
                del requests[request_id]
        return outputs

    def _run(self, scheduled: list[ScheduledSequence]) -> list[EngineSequence]:
        """One forward over `scheduled`, then sampling; the sequences whose request changed
        (advanced, finished or failed), in the order they did. With speculation, decode rows
        may carry drafts: their tokens are verified and committed first (speculative/)."""
        verify = self.speculator.plan(scheduled) if self.speculator else None
        batch = prepare_batch(scheduled) if verify is None else verify.batch
        try:
            logits = run_forward(self._forward_runner, batch)
            self._record_prompt_logprobs(batch, logits)
        except Exception as err:  # the batch's KV is unusable: fail its sequences
            logger.exception("forward failed; failing %d sequences", len(scheduled))
            for item in scheduled:
                self._end(item.seq, FINISH_ERROR, error=f"forward failed: {err}")
            return [item.seq for item in scheduled]
        for item in scheduled if verify is None else verify.plain:
            item.seq.num_computed_tokens += item.num_tokens
            self.block_manager.cache_full_blocks(item.seq)
        verified = [] if verify is None else self._commit_verified(verify, logits)
        if not batch.sampling_seqs:
            return verified
        try:
            samples = self.sampling.sample(logits, batch.sampling_seqs, batch.sampling_rows)
        except Exception as err:  # beyond what dispatch isolates (a hook, the logits copy)
            logger.exception("sampling failed; failing %d sequences", len(batch.sampling_seqs))
            for seq in batch.sampling_seqs:
                self._end(seq, FINISH_ERROR, error=sampling_fault(err))
            return verified + list(batch.sampling_seqs)
        return verified + self._append_samples(batch.sampling_seqs, samples)

    def _commit_verified(self, verify: VerifyStep, logits: DeviceLogits) -> list[EngineSequence]:
        """Append each drafted row's accepted drafts and next token (stop rules on every
        one; what follows a stop is dropped), then roll its KV back to what it keeps."""
        assert self.speculator is not None
        now = time.perf_counter()
        touched: list[EngineSequence] = []
        for row, verified, error in self.speculator.verify(verify, logits):
            seq = row.seq
            touched.append(seq)
            if verified is None:
                self._end(seq, FINISH_ERROR, error=error)
                continue
            appended = 0
            try:
                for token_id, logprobs in zip(verified.token_ids, verified.logprobs, strict=True):
                    seq.append_token(token_id, logprobs, now)
                    appended += 1
                    if seq.is_finished:
                        break
            except Exception as err:  # e.g. the detokenizer: this request alone fails
                self._end(seq, FINISH_ERROR, error=f"output processing failed: {err}")
                continue
            self.speculator.commit(row, verified.num_accepted)
            self.metrics.add_tokens(prompt=0, generated=appended)
            if seq.is_finished:
                self._release(seq)
        return touched

    def _record_prompt_logprobs(self, batch: ForwardBatch, logits: DeviceLogits) -> None:
        """The prompt logprobs of the chunks that want them, from their logits rows."""
        for seq, start, first_row, end_row in batch.prompt_logprob_rows:
            assert seq.prompt_logprobs is not None and seq.params.prompt_logprobs is not None
            rows = logits.numpy()[first_row:end_row]
            entries = prompt_logprobs(rows, seq.prompt_token_ids, seq.params.prompt_logprobs, start)
            already = len(seq.prompt_logprobs) - (start + 1)  # entries a preempted run kept
            seq.prompt_logprobs.extend(entries[max(already, 0) :])

    def _append_samples(
        self, seqs: list[EngineSequence], samples: StepSamples
    ) -> list[EngineSequence]:
        """Give each sequence its sampled token (stop rules, text); one that could not be
        sampled, or whose output processing fails, ends with an error. The sequences in the
        order their requests changed."""
        failed = [seqs[index] for index in samples.errors]
        for index, seq in zip(samples.errors, failed, strict=True):
            self._end(seq, FINISH_ERROR, error=samples.errors[index])
        now = time.perf_counter()
        appended: list[EngineSequence] = []
        for seq, token_id, logprobs in zip(seqs, samples.token_ids, samples.logprobs, strict=True):
            if token_id is None:
                continue
            if seq.first_token_time is None:
                self.metrics.add_first_token(now - seq.arrival_time)
                self.metrics.add_tokens(prompt=seq.num_prompt_tokens, generated=0)
            appended.append(seq)
            try:
                seq.append_token(token_id, logprobs, now)
            except Exception as err:  # e.g. the detokenizer: this request alone fails
                self._end(seq, FINISH_ERROR, error=f"output processing failed: {err}")
            else:
                if seq.is_finished:
                    self._release(seq)
        self.metrics.add_tokens(prompt=0, generated=len(appended))
        return failed + appended

    def _end(self, seq: EngineSequence, reason: str, error: str | None = None) -> None:
        """Finish `seq` early (abort or error) and free its blocks."""
        seq.finish(reason, error=error)
        self._release(seq)

    def _release(self, seq: EngineSequence) -> None:
        if self.speculator is not None:
            self.speculator.forget(seq)
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
