"""One step's sampling: which rows go to the device and which to the host sampler, the draws,
and a row that cannot be sampled failing alone.

Why it exists: after a forward every sequence that finished computing its tokens needs its
next token. Rows that need nothing only the host sampler does are reduced on the device in
one call (device_sampling.py says which, and how draws stay seeded); the others are copied
to the host, shown to the logits hooks (structured output masks rows there) and sampled
together. When a batch raises, on either side (a row whose masks leave no token, a value
the device call cannot take, a fault in the sampler), each of its rows is sampled alone so
that only the failing ones fail: their requests end with an error, the others carry on. A
host `ValueError` is the request's own doing and keeps its message; anything else (and any
device failure: the values it takes were checked in params.py) is reported as "sampling
failed: ..." (a server fault).

A logits hook is called as hook(sequences, logits) before each host sampling, to mask rows in
place. A hook with a `constrains(seq) -> bool` method keeps the sequences it answers True for
on the host; any other hook keeps every row on the host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from vllm_tvm.runtime.sampling.device_logits import DeviceLogits
from vllm_tvm.runtime.sampling.device_sampling import needs_host_row, sample_rows
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import Sampler, SamplingContext, TokenLogprobs

logger = logging.getLogger(__name__)

SAMPLING_FAULT = "sampling failed"
"""How the error of a row that failed for a reason other than its own parameters begins."""


class SampledSequence(Protocol):
    """What sampling reads of a sequence (requests/sequence.py's EngineSequence, which sits
    above this room: its requests carry sampling parameters and state)."""

    @property
    def params(self) -> SamplingParams: ...

    @property
    def sampling(self) -> SamplingContext: ...


LogitsHook = Callable[[list[SampledSequence], np.ndarray], None]
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
        self, logits: DeviceLogits, seqs: Sequence[SampledSequence], rows: Sequence[int]
    ) -> StepSamples:
        """The next token of `seqs[i]` from row `rows[i]` of `logits`."""
        device, host = self._split(seqs, logits.can_sample)
        if not host:  # the common step: every row on the device, in one call
            return self._sample_on_device(logits, seqs, rows)
        token_ids: list[int | None] = [None] * len(seqs)
        logprobs: list[TokenLogprobs | None] = [None] * len(seqs)
        errors: dict[int, str] = {}
        parts: list[tuple[list[int], StepSamples]] = []
        if device:  # first, as the shared generator's draws have always been ordered
            on_device = self._sample_on_device(
                logits, [seqs[i] for i in device], [rows[i] for i in device]
            )
            parts.append((device, on_device))
        host_rows = logits.numpy()[[rows[i] for i in host]]
        parts.append((host, self._sample_on_host(host_rows, [seqs[i] for i in host])))
        for indices, part in parts:
            for position, index in enumerate(indices):
                token_ids[index] = part.token_ids[position]
                logprobs[index] = part.logprobs[position]
            errors.update({indices[position]: error for position, error in part.errors.items()})
        return StepSamples(token_ids, logprobs, errors)

    def _split(
        self, seqs: Sequence[SampledSequence], can_sample: bool
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

    def may_mask(self, seq: SampledSequence) -> bool:
        """Whether a logits hook may change `seq`'s row (structured output, for one)."""
        hooks = self.logits_hooks
        return bool(hooks) and _hook_may_mask(hooks, seq)

    def _sample_on_device(
        self, logits: DeviceLogits, seqs: Sequence[SampledSequence], rows: Sequence[int]
    ) -> StepSamples:
        """The tokens of `rows` drawn on the device, one call for all of them (one call per
        row when that call raises, so that only the failing rows fail)."""
        contexts = [seq.sampling for seq in seqs]
        no_logprobs: list[TokenLogprobs | None] = [None] * len(seqs)
        try:
            tokens = sample_rows(logits, rows, contexts, self.sampler).tolist()
        except Exception:
            logger.exception("device sampling of %d rows failed; sampling each alone", len(rows))
        else:
            return StepSamples(tokens, no_logprobs, {})
        token_ids: list[int | None] = []
        errors: dict[int, str] = {}
        for index, (row, context) in enumerate(zip(rows, contexts, strict=True)):
            try:
                token_ids.append(int(sample_rows(logits, [row], [context], self.sampler)[0]))
            except Exception as err:  # the request's values were checked: never its fault
                errors[index] = sampling_fault(err)
                token_ids.append(None)
        return StepSamples(token_ids, no_logprobs, errors)

    def _sample_on_host(self, values: np.ndarray, seqs: list[SampledSequence]) -> StepSamples:
        """The tokens of the host rows `values` (row i: `seqs[i]`), after the logits hooks;
        a row that cannot be sampled gets its error instead."""
        for hook in self.logits_hooks:
            hook(seqs, values)
        contexts = [seq.sampling for seq in seqs]
        try:
            result = self.sampler.sample(values, contexts)
        except Exception as err:  # some row cannot be sampled: each row alone
            if not isinstance(err, ValueError):
                logger.exception("host sampling of %d rows failed; sampling each alone", len(seqs))
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
            except Exception as err:
                errors[index] = failure_message(err)
                token_ids.append(None)
                logprobs.append(None)
            else:
                token_ids.append(int(alone.token_ids[0]))
                logprobs.append(alone.logprobs[0])
        return StepSamples(token_ids, logprobs, errors)


def sampling_fault(err: Exception) -> str:
    """The error of a row that could not be sampled through no fault of its request."""
    return f"{SAMPLING_FAULT}: {type(err).__name__}: {err}"


def failure_message(err: Exception) -> str:
    """Why a host row could not be sampled: a ValueError's own message (the request asked
    for something that cannot be sampled), else a server fault naming the exception."""
    return str(err) if isinstance(err, ValueError) else sampling_fault(err)


def _hook_may_mask(hooks: list[LogitsHook], seq: SampledSequence) -> bool:
    """Whether a logits hook may change `seq`'s row: a hook with `constrains(seq)` says so
    itself, any other one may mask any row."""
    for hook in hooks:
        constrains = getattr(hook, "constrains", None)
        if not callable(constrains) or constrains(seq):
            return True
    return False
