"""The worst inter-token gap: a sequence keeps its longest wait between two tokens, and a
level reports the longest of its requests' (None when no request had two tokens)."""

from __future__ import annotations

from vllm_tvm.benchmarking.metrics import RequestTiming, summarize_level
from vllm_tvm.runtime.engine.intake import RequestIntake
from vllm_tvm.runtime.sampling.params import SamplingParams


def test_a_sequence_keeps_its_longest_wait_between_tokens() -> None:
    intake = RequestIntake(None, [9], 64, 10)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    request = intake.make_request([1, 2, 3], params)
    seq = request.seqs[0]
    for now in (10.0, 10.1, 12.6, 12.7):  # the first token waits 10 s: not a gap
        seq.append_token(4, None, now)
    assert seq.max_token_gap == 2.5
    assert request.metrics().max_inter_token_seconds == 2.5


def test_a_level_reports_the_longest_gap_of_any_request() -> None:
    timings = [
        RequestTiming(4, 3, 0.0, 1.0, 1.2, max_inter_token=0.15),
        RequestTiming(4, 5, 0.0, 1.0, 3.0, max_inter_token=1.75),
    ]
    assert summarize_level(2, timings, 3.0).max_itl_ms == 1750.0
    single = [RequestTiming(4, 1, 0.0, 1.0, 1.0)]
    assert summarize_level(1, single, 1.0).max_itl_ms is None
