"""One step's sampling: which rows go to the device and which to the host sampler, the draws,
and a row that cannot be sampled failing alone.

Why it exists: after a forward every sequence that finished computing its tokens needs its
next token. Rows that need nothing only the host sampler does are reduced on the device in
one call (device_sampling.py says which, and how draws stay seeded); the others are copied
to the host, shown to the logits hooks (structured output masks rows there) and sampled
together. When the host batch raises (a row whose masks leave no token), each host row is
sampled alone so that only the failing ones fail.

A logits hook is called as hook(sequences, logits) before each host sampling, to mask rows in
place. A hook with a `constrains(seq) -> bool` method keeps the sequences it answers True for
on the host; any other hook keeps every row on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vllm_tvm.runtime.model.device_logits import DeviceLogits
from vllm_tvm.runtime.sampling.device_sampling import needs_host_row, sample_rows
from vllm_tvm.runtime.sampling.sampler import Sampler, SamplingContext, TokenLogprobs

if TYPE_CHECKING:
    from vllm_tvm.runtime.engine.sequence import EngineSequence

LogitsHook = Callable[[list["EngineSequence"], np.ndarray], None]
"""hook(sequences, logits): masks the host rows of `sequences` in place."""


@dataclass(frozen=True)
class StepSamples:
    """The outcome of each sampling row of a step, in row order: its token and logprobs, or
    (token None) why it could not be sampled."""

    token_ids: list[int | None]
    logprobs: list[TokenLogprobs | None]
    errors: dict[int, str]


class SamplingDispatch:
    """Samples a step's rows on the device or the host, as each row allows."""

    def __init__(self, sampler: Sampler, device_sampling: bool) -> None:
        self.sampler = sampler
        self.device_sampling = device_sampling
        """Whether rows that need nothing host-only are sampled on the device."""
        self.logits_hooks: list[LogitsHook] = []

    def sample(
        self, logits: DeviceLogits, seqs: Sequence[EngineSequence], rows: Sequence[int]
    ) -> StepSamples:
        """The next token of `seqs[i]` from row `rows[i]` of `logits`."""
        device, host = self._split(seqs, logits.can_sample)
        if not host:  # the common step: every row on the device, in one call
            return StepSamples(self._sample_on_device(logits, seqs, rows), [None] * len(seqs), {})
        token_ids: list[int | None] = [None] * len(seqs)
        logprobs: list[TokenLogprobs | None] = [None] * len(seqs)
        if device:  # first, as the shared generator's draws have always been ordered
            device_tokens = self._sample_on_device(
                logits, [seqs[i] for i in device], [rows[i] for i in device]
            )
            for index, token in zip(device, device_tokens, strict=True):
                token_ids[index] = token
        on_host = self._sample_on_host(
            logits.numpy()[[rows[i] for i in host]], [seqs[i] for i in host]
        )
        for position, index in enumerate(host):
            token_ids[index] = on_host.token_ids[position]
            logprobs[index] = on_host.logprobs[position]
        errors = {host[position]: error for position, error in on_host.errors.items()}
        return StepSamples(token_ids, logprobs, errors)

    def _split(
        self, seqs: Sequence[EngineSequence], can_sample: bool
    ) -> tuple[list[int], list[int]]:
        """Indices of the rows sampled on the device, and of those sampled on the host."""
        if not self.device_sampling:
            return [], list(range(len(seqs)))
        device: list[int] = []
        host: list[int] = []
        hooks = self.logits_hooks
        for index, seq in enumerate(seqs):
            on_device = (
                not needs_host_row(seq.sampling)
                and (can_sample or seq.params.greedy)
                and not (hooks and _hook_may_mask(hooks, seq))
            )
            (device if on_device else host).append(index)
        return device, host

    def _sample_on_device(
        self, logits: DeviceLogits, seqs: Sequence[EngineSequence], rows: Sequence[int]
    ) -> list[int | None]:
        """The tokens of `rows` drawn on the device, one call for all of them."""
        contexts = [seq.sampling for seq in seqs]
        return sample_rows(logits, rows, contexts, self.sampler).tolist()

    def _sample_on_host(self, values: np.ndarray, seqs: list[EngineSequence]) -> StepSamples:
        """The tokens of the host rows `values` (row i: `seqs[i]`), after the logits hooks;
        a row that cannot be sampled gets its error instead."""
        for hook in self.logits_hooks:
            hook(seqs, values)
        contexts = [seq.sampling for seq in seqs]
        try:
            result = self.sampler.sample(values, contexts)
        except ValueError:  # some row cannot be sampled: each row alone
            return self._sample_rows_alone(values, contexts)
        return StepSamples(result.token_ids.tolist(), result.logprobs, {})

    def _sample_rows_alone(
        self, values: np.ndarray, contexts: list[SamplingContext]
    ) -> StepSamples:
        """One sampler call per row, so that only the rows that cannot be sampled fail."""
        token_ids: list[int | None] = []
        logprobs: list[TokenLogprobs | None] = []
        errors: dict[int, str] = {}
        for index, context in enumerate(contexts):
            try:
                alone = self.sampler.sample(values[index : index + 1], [context])
            except ValueError as err:
                errors[index] = str(err)
                token_ids.append(None)
                logprobs.append(None)
            else:
                token_ids.append(int(alone.token_ids[0]))
                logprobs.append(alone.logprobs[0])
        return StepSamples(token_ids, logprobs, errors)


def _hook_may_mask(hooks: list[LogitsHook], seq: EngineSequence) -> bool:
    """Whether a logits hook may change `seq`'s row: a hook with `constrains(seq)` says so
    itself, any other one may mask any row."""
    for hook in hooks:
        constrains = getattr(hook, "constrains", None)
        if not callable(constrains) or constrains(seq):
            return True
    return False
