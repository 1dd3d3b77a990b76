"""Which sequences run in the next step, and how many of their tokens: continuous batching
under a token budget, with chunked prefill, a waiting-queue policy and preemption.

Why it exists: one forward serves many sequences at once, but the step must fit a token
budget (`max_num_batched_tokens`), a batch size (`max_num_seqs`) and the free KV blocks.
vLLM v1's rule decides, with no prefill/decode split: every sequence has tokens not yet in
the KV cache (a whole prompt, the rest of one, or the token sampled last step) and gets as
many as the budget allows, running sequences first, then waiting ones in policy order.

- A prompt longer than what is left of the budget is chunked: its next piece runs this step.
  A prompt with images is admitted only when its first chunk reaches through its last
  image (requests/prompt_images.py: an image's soft tokens are prefilled together, from
  the prompt's start); until then it waits, as for blocks.
- When a running sequence cannot get a block, the lowest-priority running sequence is
  preempted (its blocks freed, its tokens recomputed later; the cached ones come back
  through the prefix cache), until it can or it was the one preempted. No new sequence is
  admitted in a step that preempted.
- Policies: "fcfs" (arrival order; the last admitted is preempted first), "priority"
  (lower `priority` value first, then arrival; the largest value is preempted first) and
  "lpm" (longest prefix match: the waiting sequence with the most cached prompt blocks
  first, SGLang's cache-aware policy; fcfs beyond `LPM_MAX_QUEUE` waiting sequences, where
  the matching would cost more than it saves).
- Pacing (`step_time_target`, seconds): while some running sequence is between tokens, the
  step's prompt tokens are capped by a `StepPacer` (step_pacer.py) so that its time, and
  with it every stream's inter-token gap, stays near the target. None: not paced.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, get_args

from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.engine.step_pacer import StepPacer, paced_prompt_floor
from vllm_tvm.runtime.kv.block_manager import BlockManager
from vllm_tvm.runtime.requests.sequence import (
    EngineSequence,
    ScheduledSequence,
    SequenceStatus,
)

SchedulingPolicy = Literal["fcfs", "priority", "lpm"]
POLICIES: tuple[str, ...] = get_args(SchedulingPolicy)
LPM_MAX_QUEUE = 128


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits of one step, the waiting-queue policy and the step time target (seconds;
    None: steps are not paced)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    policy: SchedulingPolicy
    step_time_target: float | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(
                f"unsupported scheduling_policy {self.policy!r}; supported: " + ", ".join(POLICIES)
            )
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"max_num_batched_tokens must be at least 1, got {self.max_num_batched_tokens}"
            )


@dataclass
class SchedulerOutput:
    """One step's work, in batch order, and the sequences it preempted."""

    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[EngineSequence] = field(default_factory=list)


class Scheduler:
    """Holds the waiting and running sequences and picks each step's batch."""

    def __init__(
        self, config: SchedulerConfig, block_manager: BlockManager, metrics: EngineMetrics
    ) -> None:
        self.config = config
        self.block_manager = block_manager
        self.metrics = metrics
        self.waiting: deque[EngineSequence] = deque()
        self.running: list[EngineSequence] = []
        target = config.step_time_target
        self.pacer = (
            StepPacer(target, paced_prompt_floor(config.max_num_batched_tokens))
            if target is not None
            else None
        )

    @property
    def has_unfinished(self) -> bool:
        """Whether any sequence waits or runs."""
        return bool(self.waiting or self.running)

    def add(self, seq: EngineSequence) -> None:
        """Queue a new sequence."""
        self.waiting.append(seq)

    def remove(self, seq: EngineSequence) -> None:
        """Take a sequence out (finished, aborted or failed) and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)

    def schedule(self) -> SchedulerOutput:
        """Pick this step's sequences and token counts; reserve their blocks."""
        return self._schedule_decodes() or self._schedule_any()

    def record_step(self, scheduled: list[ScheduledSequence], seconds: float) -> None:
        """Tell the pacer, if any, that running `scheduled` took `seconds`."""
        if self.pacer is not None:
            self.pacer.record(scheduled, seconds)

    def _schedule_decodes(self) -> SchedulerOutput | None:
        """The common step at no per-sequence policy cost: nothing waits and every running
        sequence computes just its last sampled token, within the budget and the free
        blocks. Then every running sequence runs one token, in order, which is what
        `_schedule_any` decides for such a step (no preemption, nothing to admit). None, with
        nothing reserved, for any other step."""
        running = self.running
        if self.waiting or not running or len(running) > self.config.max_num_batched_tokens:
            return None
        for seq in running:
            if len(seq.token_ids) - seq.num_computed_tokens != 1:
                return None
        if not self.block_manager.grow_each_by_one(running):
            return None
        return SchedulerOutput(scheduled=[ScheduledSequence(seq, 1) for seq in running])

    def _schedule_any(self) -> SchedulerOutput:
        """vLLM's rule for any step: running sequences first (preempting when blocks run
        out), then waiting ones in policy order."""
        output = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        prompt_budget = self._prompt_token_allowance()
        for seq in list(self.running):
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            num_tokens = min(seq.num_tokens - seq.num_computed_tokens, budget)
            if num_tokens > 1:
                num_tokens = min(num_tokens, prompt_budget)
                if num_tokens == 0:
                    continue
                prompt_budget -= num_tokens
            target = seq.num_computed_tokens + num_tokens
            while not self.block_manager.can_grow(seq, target):
                victim = self._preemption_victim()
                budget += self._preempt(victim, output)
                if victim is seq:
                    break
            if seq.status is SequenceStatus.RUNNING:
                self.block_manager.grow(seq, target)
                output.scheduled.append(ScheduledSequence(seq, num_tokens))
                budget -= num_tokens
        if not output.preempted:
            self._admit(output, min(budget, prompt_budget))
        return output

    def _prompt_token_allowance(self) -> int:
        """The prompt tokens this step may carry: the pacer's allowance while a running
        sequence waits for its next token, else the whole budget."""
        budget = self.config.max_num_batched_tokens
        if self.pacer is None:
            return budget
        decode_rows = sum(1 for seq in self.running if seq.output_token_ids)
        if decode_rows == 0:
            return budget
        allowance = self.pacer.prompt_token_allowance(decode_rows)
        return budget if allowance is None else min(allowance, budget)

    def _admit(self, output: SchedulerOutput, budget: int) -> None:
        """Admit waiting sequences in policy order with `budget` tokens (every admitted
        sequence computes prompt tokens)."""
        manager = self.block_manager
        for seq in self._waiting_order():
            if budget == 0 or len(self.running) >= self.config.max_num_seqs:
                break
            hit = manager.match_prefix(seq)
            num_cached = len(hit) * manager.block_size
            num_tokens = min(seq.num_tokens - num_cached, budget)
            if seq.images is not None and num_cached + num_tokens < seq.images.prefill_floor:
                break  # its images are prefilled in one chunk: it waits for a budget that fits
            if not manager.can_allocate(hit, num_cached + num_tokens):
                break
            manager.allocate(seq, hit, num_cached + num_tokens)
            if manager.enable_prefix_caching:
                self.metrics.add_prefix_query(seq.num_tokens, seq.num_cached_tokens)
            self.waiting.remove(seq)
            self.running.append(seq)
            seq.status = SequenceStatus.RUNNING
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.perf_counter()
            output.scheduled.append(ScheduledSequence(seq, num_tokens))
            budget -= num_tokens

    def _waiting_order(self) -> list[EngineSequence]:
        policy = self.config.policy
        if policy == "priority":
            return sorted(self.waiting, key=lambda s: (s.priority, s.arrival_time, s.seq_id))
        if policy == "lpm" and len(self.waiting) <= LPM_MAX_QUEUE:
            hits = {s.seq_id: len(self.block_manager.match_prefix(s)) for s in self.waiting}
            return sorted(self.waiting, key=lambda s: (-hits[s.seq_id], s.arrival_time, s.seq_id))
        return list(self.waiting)

    def _preemption_victim(self) -> EngineSequence:
        if self.config.policy == "priority":
            return max(self.running, key=lambda s: (s.priority, s.arrival_time, s.seq_id))
        return self.running[-1]

    def _preempt(self, seq: EngineSequence, output: SchedulerOutput) -> int:
        """Send a running sequence back to the queue's front; the budget it gives back."""
        returned = 0
        for item in output.scheduled:
            if item.seq is seq:
                output.scheduled.remove(item)
                returned = item.num_tokens
                break
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
        output.preempted.append(seq)
        self.metrics.add_preemption()
        return returned
