"""A forward the engine has launched and not yet sampled, and what is taken from its logits
at once (prompt logprobs).

Why it exists: under async scheduling (llm_engine.py) one `step()` call launches a forward
and the next call samples it, so what a forward needs at sampling time (its batch, its
speculative verify plan, its logits on the device, when it started) must outlive the call
that launched it. A synchronous engine launches and collects in the same call through the
same record.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_tvm.runtime.model.batch import ForwardBatch
from vllm_tvm.runtime.requests.sequence import ScheduledSequence
from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.sampling.sampler import prompt_logprobs
from vllm_tvm.runtime.speculative.speculator import VerifyStep


@dataclass(frozen=True)
class LaunchedStep:
    """One launched forward: `scheduled` as `batch` (or a speculative `verify` plan), its
    `logits` rows on the device (None: the forward failed and its sequences have ended),
    and the `perf_counter` time its launch began (the scheduler's pacer times steps)."""

    scheduled: list[ScheduledSequence]
    batch: ForwardBatch
    verify: VerifyStep | None
    logits: DeviceLogits | None
    started: float


def record_prompt_logprobs(batch: ForwardBatch, logits: DeviceLogits) -> None:
    """The prompt logprobs of the chunks that want them, from their logits rows."""
    for seq, start, first_row, end_row in batch.prompt_logprob_rows:
        assert seq.prompt_logprobs is not None and seq.params.prompt_logprobs is not None
        rows = logits.numpy()[first_row:end_row]
        entries = prompt_logprobs(rows, seq.prompt_token_ids, seq.params.prompt_logprobs, start)
        already = len(seq.prompt_logprobs) - (start + 1)  # entries a preempted run kept
        seq.prompt_logprobs.extend(entries[max(already, 0) :])
