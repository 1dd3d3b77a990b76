"""`LLMEngine`: requests in, one batched step at a time, `RequestOutput`s out.

Why it exists: this is the loop every front end shares (`LLM.generate`, `generate --stream`,
the async engine behind the server; `from_args` builds one, see args.py). Each `step()`:
the scheduler picks the batch (scheduler.py), the batch becomes ONE forward (decode rows
alone: the compiled decode; anything else: one ragged prefill, see model/batch.py), every
sequence whose tokens are all computed samples its next token (on the device when it can,
see sampling/dispatch.py), the stop rules run, what finished is freed, and the outputs of
the requests the step touched are returned. Under async scheduling (on by default for
CUDA) a forward is sampled by the next `step()` call, after that call has launched the
following forward, so the host's text and output work overlaps the device's (see `step`,
token_appender.py). Requests are checked and built in intake.py.

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

from vllm_tvm.runtime.engine.args import ASYNC_WITH_SPECULATION, EngineArgs
from vllm_tvm.runtime.engine.builder import load_engine_parts
from vllm_tvm.runtime.engine.cache_fit import recurrent_slots_for
from vllm_tvm.runtime.engine.image_intake import ImageIntake
from vllm_tvm.runtime.engine.intake import PromptInput, RequestIntake
from vllm_tvm.runtime.engine.launched_step import LaunchedStep, record_prompt_logprobs
from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.engine.scheduler import Scheduler, SchedulerConfig
from vllm_tvm.runtime.engine.token_appender import TokenAppender
from vllm_tvm.runtime.kv.block_manager import BlockManager
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.model.batch import ForwardRunner, prepare_batch, run_forward
from vllm_tvm.runtime.model.runner import ModelRunner
from vllm_tvm.runtime.model.runner_interface import Runner
from vllm_tvm.runtime.multimodal.image_decoding import DecodedImage
from vllm_tvm.runtime.requests.outputs import RequestOutput
from vllm_tvm.runtime.requests.sequence import (
    FINISH_ABORT,
    FINISH_ERROR,
    EngineSequence,
    OutputKind,
    Request,
    ScheduledSequence,
)
from vllm_tvm.runtime.sampling.device_sampling import device_sampling_enabled
from vllm_tvm.runtime.sampling.dispatch import (
    LogitsHook,
    SamplingDispatch,
    sampling_fault,
)
from vllm_tvm.runtime.sampling.params import LogprobsMode, SamplingParams
from vllm_tvm.runtime.sampling.sampler import Sampler
from vllm_tvm.runtime.speculative.config import SpeculativeConfig
from vllm_tvm.runtime.speculative.head_proposer import HeadProposer
from vllm_tvm.runtime.speculative.proposers import proposer_for
from vllm_tvm.runtime.speculative.speculator import Speculator
from vllm_tvm.runtime.speculative.target_hidden import HiddenCapturingRunner
from vllm_tvm.runtime.tokenization import Tokenizer

logger = logging.getLogger(__name__)


class LLMEngine:
    """The engine loop: `add_request`, then `step()` until `has_unfinished` is False (steps
    run on the caller's thread; the server runs them on a thread of its own)."""

    def __init__(
        self,
        runner: Runner,
        tokenizer: Tokenizer | None,
        eos_token_ids: list[int],
        cache_config: CacheConfig,
        scheduler_config: SchedulerConfig,
        max_model_len: int,
        logprobs_mode: LogprobsMode = "raw_logprobs",
        seed: int | None = None,
        speculative_config: SpeculativeConfig | None = None,
        draft_runner: ModelRunner | None = None,
        async_scheduling: bool = False,
        image_intake: ImageIntake | None = None,
    ) -> None:
        """Drive `runner`, whose KV cache must hold `cache_config`'s pool, `max_num_seqs`
        sequences per forward and a prefill chunk of the step's token budget. `tokenizer`
        None: token-id prompts only, no text in the outputs. `speculative_config` None:
        every decode step computes one token per sequence; methods `draft_model`, `eagle` and
        `mtp` draft with `draft_runner` (a draft model, an EAGLE head, an MTP layer).
        `async_scheduling`: each forward is sampled by the next `step()` call (see `step`);
        not with speculation. `image_intake` None: text prompts only (a model without a
        vision tower)."""
        if async_scheduling and speculative_config is not None:
            raise ValueError(ASYNC_WITH_SPECULATION)
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
        slots = recurrent_slots_for(runner, cache_config, scheduler_config, speculative_config)
        self.block_manager = BlockManager(runner.kv_cache, cache_config, slots)
        self.scheduler = Scheduler(scheduler_config, self.block_manager, self.metrics)
        self.intake = RequestIntake(
            tokenizer, eos_token_ids, max_model_len, runner.vocab_size, image_intake
        )
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
                None if slots is None else runner.recurrent_pool,
            )
        self.async_scheduling = async_scheduling
        self.appender = TokenAppender(self.metrics, self._fail, self._release, async_scheduling)
        self._requests: dict[str, Request] = {}
        self._pending: list[RequestOutput] = []
        self._launched: LaunchedStep | None = None

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
            args.overlaps_steps,
            parts.image_intake,
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
        return bool(
            self.scheduler.has_unfinished
            or self._pending
            or self._launched
            or self.appender.has_deferred
        )

    def make_request(
        self,
        prompt: PromptInput,
        params: SamplingParams,
        request_id: str | None = None,
        priority: int = 0,
        output_kind: OutputKind = "cumulative",
        images: Sequence[DecodedImage] = (),
    ) -> Request:
        """Validate and tokenize a request without queuing it (safe from any thread); see
        `RequestIntake.make_request` for what is refused."""
        return self.intake.make_request(prompt, params, request_id, priority, output_kind, images)

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
        images: Sequence[DecodedImage] = (),
    ) -> str:
        """Validate and queue a request (text or token ids, and its images); its id (made
        up when None)."""
        request = self.make_request(prompt, params, request_id, priority, output_kind, images)
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
        """Run one batch; the outputs of the requests it advanced, finished or aborted.

        With async scheduling a call first samples the forward the previous call launched
        (waiting for the device), schedules and launches the next forward, and only then
        renders the sampled tokens' text and outputs, which the device's work now hides. A
        token that ends its sequence by itself (an EOS or stop id, the length limit) and a
        request's first token are rendered at once; a call that gives first tokens hands
        them out before launching another forward, so time to first token does not grow."""
        outputs, self._pending = self._pending, []
        touched: list[EngineSequence] = []
        if self._launched is not None:  # dropped before the next launch: its logits too
            touched, self._launched = self._collect(self._launched), None
        if not any(len(seq.output_token_ids) == 1 for seq in touched):
            scheduled = self.scheduler.schedule().scheduled
            if scheduled:
                launched = self._launch(scheduled)
                if self.async_scheduling:
                    self._launched = launched
                else:
                    touched = self._collect(launched)
        touched += self.appender.render_deferred()
        slots = self.block_manager.recurrent_slots
        self.metrics.set_gauges(
            len(self.scheduler.running),
            len(self.scheduler.waiting),
            self.block_manager.usage,
            None if slots is None else slots.usage,
        )
        requests = self._requests
        for request_id in dict.fromkeys(seq.request_id for seq in touched):
            request = requests.get(request_id)
            if request is None:  # aborted since its forward was launched: output given then
                continue
            output = request.make_output()
            if output is None:
                finished = request.is_finished
            else:
                outputs.append(output)
                finished = output.finished
            if finished:
                del requests[request_id]
        return outputs

    def _launch(self, scheduled: list[ScheduledSequence]) -> LaunchedStep:
        """Start one forward over `scheduled` (on a GPU it runs while the host goes on);
        prompt logprobs and the computed-token marks are taken now. With speculation,
        decode rows may carry drafts, verified when the step is collected (speculative/)."""
        started = time.perf_counter()
        verify = self.speculator.plan(scheduled) if self.speculator else None
        batch = prepare_batch(scheduled) if verify is None else verify.batch
        try:
            logits = run_forward(self._forward_runner, batch)
            record_prompt_logprobs(batch, logits)
        except Exception as err:  # the batch's KV is unusable: fail its sequences
            logger.exception("forward failed; failing %d sequences", len(scheduled))
            for item in scheduled:
                self._end(item.seq, FINISH_ERROR, error=f"forward failed: {err}")
            return LaunchedStep(scheduled, batch, verify, None, started)
        for item in scheduled if verify is None else verify.plain:
            item.seq.num_computed_tokens += item.num_tokens
            self.block_manager.cache_full_blocks(item.seq)
        return LaunchedStep(scheduled, batch, verify, logits, started)

    def _collect(self, launched: LaunchedStep) -> list[EngineSequence]:
        """Sample a launched forward's tokens (this waits for the device) and append them;
        the sequences whose request changed (advanced, finished or failed), in order."""
        logits, batch = launched.logits, launched.batch
        if logits is None:
            return [item.seq for item in launched.scheduled]
        verify = launched.verify
        verified = (
            []
            if verify is None or self.speculator is None
            else self.speculator.append_verified(verify, logits, self._fail, self._release)
        )
        touched = verified
        if batch.sampling_seqs:
            try:
                samples = self.sampling.sample(logits, batch.sampling_seqs, batch.sampling_rows)
            except Exception as err:  # beyond what dispatch isolates (a hook, the logits copy)
                logger.exception("sampling failed; failing %d sequences", len(batch.sampling_seqs))
                live = [seq for seq in batch.sampling_seqs if not seq.is_finished]
                for seq in live:
                    self._end(seq, FINISH_ERROR, error=sampling_fault(err))
                touched = verified + live
            else:
                touched = verified + self.appender.append(batch.sampling_seqs, samples)
        self.scheduler.record_step(launched.scheduled, time.perf_counter() - launched.started)
        return touched

    def _fail(self, seq: EngineSequence, error: str) -> None:
        """End `seq` with an error (its request alone)."""
        self._end(seq, FINISH_ERROR, error=error)

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
