"""A sampler that raises, on the device or on the host, ends only the requests whose rows it
could not sample (finish_reason "error"); the other requests of the same step carry on with
the tokens they would have had, and the engine keeps serving."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from engine_helpers import GREEDY, prompts_of_lengths, token_ids

from vllm_tvm.runtime.sampling import dispatch
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import Sampler, SamplingContext

POISONED_TOP_K = 13
"""A device row with this top_k makes the (patched) device sampler raise."""

SEEDED = SamplingParams(temperature=0.8, top_k=40, seed=5, max_tokens=8, ignore_eos=True)
POISONED_ON_DEVICE = SamplingParams(
    temperature=0.8, top_k=POISONED_TOP_K, seed=6, max_tokens=8, ignore_eos=True
)
POISONED_ON_HOST = SamplingParams(temperature=0.0, logprobs=3, max_tokens=8, ignore_eos=True)
HOST_ROW = SamplingParams(temperature=0.0, logprobs=1, max_tokens=8, ignore_eos=True)


def test_a_failing_device_draw_ends_only_its_own_row(make_llm, monkeypatch) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [9, 14, 11])
    expected = token_ids(llm.generate([prompts[0], prompts[2]], [SEEDED, GREEDY]))
    real = dispatch.sample_rows

    def poisoned(
        logits: Any, rows: Sequence[int], contexts: Sequence[SamplingContext], sampler: Sampler
    ) -> np.ndarray:
        if any(ctx.params.top_k == POISONED_TOP_K for ctx in contexts):
            raise OverflowError("top_k does not fit")
        return real(logits, rows, contexts, sampler)

    monkeypatch.setattr(dispatch, "sample_rows", poisoned)
    outputs = llm.generate(prompts, [SEEDED, POISONED_ON_DEVICE, GREEDY])
    failed = outputs[1]
    assert failed.outputs[0].finish_reason == "error"
    assert (failed.error or "").startswith("sampling failed: OverflowError: top_k does not fit")
    assert [o.outputs[0].finish_reason for o in (outputs[0], outputs[2])] == ["length"] * 2
    assert token_ids([outputs[0], outputs[2]]) == expected


def test_a_host_sampler_fault_ends_only_its_own_row(make_llm, monkeypatch) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [9, 14, 11])
    expected = token_ids(llm.generate([prompts[0], prompts[2]], [HOST_ROW, GREEDY]))
    real = Sampler.sample

    def poisoned(self: Sampler, logits: np.ndarray, contexts: list[SamplingContext]) -> Any:
        if any(ctx.params.logprobs == POISONED_ON_HOST.logprobs for ctx in contexts):
            raise RuntimeError("sampler fault")
        return real(self, logits, contexts)

    monkeypatch.setattr(Sampler, "sample", poisoned)
    outputs = llm.generate(prompts, [HOST_ROW, POISONED_ON_HOST, GREEDY])
    assert outputs[1].outputs[0].finish_reason == "error"
    assert outputs[1].error == "sampling failed: RuntimeError: sampler fault"
    assert token_ids([outputs[0], outputs[2]]) == expected


def test_a_sampling_step_that_raises_fails_its_rows_and_the_engine_goes_on(make_llm) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [9, 14])
    expected = token_ids(llm.generate(prompts, GREEDY))

    def broken_hook(_seqs: list[Any], _logits: np.ndarray) -> None:
        raise RuntimeError("hook fault")

    llm.engine.logits_hooks.append(broken_hook)
    failed = llm.generate(prompts, GREEDY)
    assert [o.outputs[0].finish_reason for o in failed] == ["error", "error"]
    assert failed[0].error == "sampling failed: RuntimeError: hook fault"
    llm.engine.logits_hooks.remove(broken_hook)
    assert token_ids(llm.generate(prompts, GREEDY)) == expected
