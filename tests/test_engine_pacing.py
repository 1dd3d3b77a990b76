"""A long prompt arriving while a stream decodes does not stall that stream: with a step time
target, the scheduler gives every step the stream's token and only as many prompt tokens as
the measured costs fit in the target; greedy outputs are those of an unpaced engine."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from engine_helpers import GREEDY, prompts_of_lengths, token_ids

from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.intake import RequestIntake
from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.runtime.engine.metrics import EngineMetrics
from vllm_tvm.runtime.engine.scheduler import Scheduler, SchedulerConfig
from vllm_tvm.runtime.engine.step_pacer import StepPacer, paced_prompt_floor
from vllm_tvm.runtime.kv.block_manager import BlockManager
from vllm_tvm.runtime.kv.cache_config import CacheConfig
from vllm_tvm.runtime.requests.sequence import EngineSequence
from vllm_tvm.runtime.sampling.params import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from engine_host_cost import NullKVCache

VOCAB = 50
DECODE_ROW_SECONDS = 0.05
PROMPT_TOKEN_SECONDS = 0.001  # a slow device: a 2,048-token budget would be a 2 s step
TARGET_SECONDS = 0.5
LONG_PROMPT = 1500
CHUNK = 16


class Step:
    """One scheduled item as the pacer reads it."""

    def __init__(self, num_tokens: int) -> None:
        self.num_tokens = num_tokens


def _modelled_seconds(num_tokens: list[int]) -> float:
    decode_rows = sum(1 for n in num_tokens if n == 1)
    prompt_tokens = sum(n for n in num_tokens if n > 1)
    return decode_rows * DECODE_ROW_SECONDS + prompt_tokens * PROMPT_TOKEN_SECONDS


def _scheduler(step_time_target: float | None) -> tuple[Scheduler, NullKVCache]:
    kv = NullKVCache()
    cache = CacheConfig(block_size=16, num_blocks=256, enable_prefix_caching=False)
    config = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=2048,
        policy="fcfs",
        step_time_target=step_time_target,
    )
    return Scheduler(config, BlockManager(kv, cache), EngineMetrics()), kv  # type: ignore[arg-type]


def _add(scheduler: Scheduler, intake: RequestIntake, length: int, max_tokens: int):
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    rng = random.Random(length)
    request = intake.make_request([rng.randrange(VOCAB) for _ in range(length)], params)
    scheduler.add(request.seqs[0])
    return request.seqs[0]


def _run_steps_with_a_long_prompt(step_time_target: float | None):
    """A 20-token stream decodes; a LONG_PROMPT prompt arrives after its third token. Every
    step is timed by the cost model above. The (stream tokens, prompt tokens) of each step
    until the long prompt's first token."""
    scheduler, kv = _scheduler(step_time_target)
    intake = RequestIntake(None, [VOCAB], 4096, VOCAB + 1)
    stream = _add(scheduler, intake, 20, max_tokens=400)
    long_prompt: EngineSequence | None = None
    steps: list[tuple[int, int]] = []
    while long_prompt is None or not long_prompt.output_token_ids:
        if long_prompt is None and len(stream.output_token_ids) == 3:
            long_prompt = _add(scheduler, intake, LONG_PROMPT, max_tokens=4)
        output = scheduler.schedule()
        counts = {item.seq.seq_id: item.num_tokens for item in output.scheduled}
        for item in output.scheduled:
            seq = item.seq
            assert seq.kv_id is not None
            seq.num_computed_tokens += item.num_tokens
            kv.lengths[seq.kv_id] += item.num_tokens
            if seq.num_computed_tokens == len(seq.token_ids):
                seq.append_token(7, None, 0.0)
        scheduler.record_step(
            output.scheduled, _modelled_seconds([item.num_tokens for item in output.scheduled])
        )
        if long_prompt is not None:
            steps.append((counts.get(stream.seq_id, 0), counts.get(long_prompt.seq_id, 0)))
    scheduler.remove(stream)
    scheduler.remove(long_prompt)
    return steps


def test_a_stream_gets_a_token_every_step_while_a_long_prompt_prefills() -> None:
    steps = _run_steps_with_a_long_prompt(TARGET_SECONDS)
    assert sum(prompt for _, prompt in steps) == LONG_PROMPT
    assert all(stream == 1 for stream, _ in steps)
    # Each step fits the target (the cost model's estimates are learned exactly).
    fitting = int((TARGET_SECONDS - DECODE_ROW_SECONDS) / PROMPT_TOKEN_SECONDS)
    assert max(prompt for _, prompt in steps) == fitting
    assert max(_modelled_seconds([1, prompt]) for _, prompt in steps) <= TARGET_SECONDS + 1e-9


def test_without_a_target_the_long_prompt_takes_one_step_of_the_budget() -> None:
    steps = _run_steps_with_a_long_prompt(None)
    assert steps == [(1, LONG_PROMPT)]  # the stream waits 1.5 s for this one step


def test_the_allowance_has_floors_and_no_limit_before_a_measurement() -> None:
    pacer = StepPacer(1.0, min_prompt_tokens=16)
    assert pacer.prompt_token_allowance(4) is None
    pacer.record([Step(1)] * 4, 0.4)  # a decode row costs 0.1 s
    pacer.record([Step(100)], 1.0)  # a prompt token costs 0.01 s
    assert pacer.prompt_token_allowance(0) == 100  # what fits in the target
    assert pacer.prompt_token_allowance(4) == 60
    # Decode rows over the target: the prompt tokens may take as long as they do.
    assert pacer.prompt_token_allowance(20) == 200
    pacer.record([Step(1000)], 1e5)  # a prompt token costs seconds now
    assert pacer.prompt_token_allowance(1) == 16
    assert paced_prompt_floor(2048) == 256 and paced_prompt_floor(4) == 1
    with pytest.raises(ValueError, match="positive"):
        StepPacer(0.0, min_prompt_tokens=16)


def test_a_negative_itl_target_is_refused_and_zero_turns_pacing_off() -> None:
    with pytest.raises(ValueError, match="itl_target_ms"):
        EngineArgs(model="m", itl_target_ms=-1.0)
    assert EngineArgs(model="m", itl_target_ms=0.0).step_time_target is None
    assert EngineArgs(model="m").step_time_target == EngineArgs(model="m").itl_target_ms / 1e3


def test_paced_greedy_outputs_equal_unpaced(make_llm, monkeypatch) -> None:
    """A pacer that allows CHUNK prompt tokens per step with a decode row
    cuts the long prompt into chunks beside the running stream; the tokens do not change."""
    unpaced = make_llm(itl_target_ms=0.0)
    paced = make_llm()
    pacer = paced.engine.scheduler.pacer
    monkeypatch.setattr(pacer, "prompt_token_allowance", lambda rows: CHUNK)
    short, long = prompts_of_lengths(unpaced, [5, 90])
    expected = token_ids(unpaced.generate([short, long], GREEDY))
    engine = paced.engine
    engine.add_request("stream", short, GREEDY)
    engine.step()  # the short prompt prefills and samples its first token
    engine.add_request("long", long, GREEDY)
    outputs = {}
    prompt_tokens_per_step = []
    while engine.has_unfinished:
        before = _computed(engine, "long")
        for output in engine.step():
            outputs[output.request_id] = output
        prompt_tokens_per_step.append(_computed(engine, "long") - before)
    assert token_ids([outputs["stream"], outputs["long"]]) == expected
    assert max(prompt_tokens_per_step) == CHUNK  # cut into chunks


def _computed(engine: LLMEngine, request_id: str) -> int:
    """The request's computed tokens (0 once it is finished)."""
    request = engine._requests.get(request_id)
    return request.seqs[0].num_computed_tokens if request is not None else 0
