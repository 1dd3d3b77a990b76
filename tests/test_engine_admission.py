"""Admission: a call's sequences and the waiting requests are bounded, nothing is reserved by
a refused call, and once the async engine stops admitting every stream in flight ends with
finish_reason "abort" while new calls are refused."""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import prompts_of_lengths

from vllm_tvm.runtime.engine.admission import (
    Admission,
    AdmissionLimits,
    EngineBusyError,
    EngineStoppingError,
    TooManySequencesError,
)
from vllm_tvm.runtime.engine.async_engine import AsyncEngine
from vllm_tvm.runtime.sampling.params import SamplingParams

LONG = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)


def test_a_call_over_the_sequence_cap_is_refused_with_its_numbers() -> None:
    admission = Admission(AdmissionLimits(max_sequences_per_request=8))
    with pytest.raises(TooManySequencesError, match=r"asks for 9 sequences \(3 prompts x n=3\)"):
        admission.reserve(["a", "b", "c"], 3)
    assert admission.num_waiting == 0
    admission.reserve(["a", "b"], 4)
    assert admission.num_waiting == 2


def test_waiting_requests_are_capped_and_released() -> None:
    admission = Admission(AdmissionLimits(max_waiting_requests=3))
    admission.reserve(["a", "b"], 1)
    with pytest.raises(EngineBusyError, match=r"2 requests are already waiting \(at most 3"):
        admission.reserve(["c", "d"], 1)
    admission.reserve(["c"], 1)
    admission.release("a")
    admission.release("a")  # releasing twice (first output, then the stream's end) is a no-op
    admission.reserve(["d"], 1)
    assert admission.num_waiting == 3


def test_a_stopped_admission_refuses_everything() -> None:
    admission = Admission(AdmissionLimits())
    admission.stop()
    with pytest.raises(EngineStoppingError):
        admission.reserve(["a"], 1)


@pytest.mark.parametrize("field", ["max_sequences_per_request", "max_waiting_requests"])
def test_limits_below_one_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must be at least 1, got 0"):
        AdmissionLimits(**{field: 0})


def test_stop_admitting_aborts_every_stream_in_flight(make_llm) -> None:
    llm = make_llm()
    prompts = prompts_of_lengths(llm, [9, 14])

    async def run(engine: AsyncEngine) -> list[tuple[str | None, int]]:
        started = asyncio.Event()

        async def stream(prompt: list[int]) -> tuple[str | None, int]:
            tokens = 0
            reason = None
            async for output in engine.generate(prompt, LONG):
                tokens += len(output.outputs[0].token_ids)
                reason = output.outputs[0].finish_reason
                started.set()
            return reason, tokens

        tasks = [asyncio.create_task(stream(prompt)) for prompt in prompts]
        await started.wait()
        engine.stop_admitting()
        with pytest.raises(EngineStoppingError):
            engine.reserve(["late"], 1)
        return list(await asyncio.gather(*tasks))

    engine = AsyncEngine(llm.engine)
    try:
        ends = asyncio.run(run(engine))
    finally:
        engine.shutdown()
    assert [reason for reason, _tokens in ends] == ["abort", "abort"]
    assert all(tokens < LONG.max_tokens for _reason, tokens in ends)
    assert engine.admission.num_waiting == 0
