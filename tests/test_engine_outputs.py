"""`Request.make_output` puts each fact in its own field, for every output kind (it builds
the outputs positionally, as it runs per request per step when streaming)."""

from __future__ import annotations

import numpy as np

from vllm_tvm.runtime.engine.intake import RequestIntake
from vllm_tvm.runtime.requests.outputs import RequestMetrics
from vllm_tvm.runtime.requests.sequence import OutputKind, Request
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.sampling.sampler import TokenLogprobs

PROMPT = [5, 6, 7]


def _request(output_kind: OutputKind, **params: object) -> Request:
    intake = RequestIntake(None, [2], max_model_len=64, vocab_size=100)
    sampling = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True, **params)  # type: ignore[arg-type]
    request = intake.make_request(PROMPT, sampling, "req-7", output_kind=output_kind)
    request.arrival_time = 10.0
    seq = request.seqs[0]
    seq.first_scheduled_time = 10.5
    seq.num_cached_tokens = 32
    return request


def _advance(request: Request, token_id: int, now: float) -> None:
    seq = request.seqs[0]
    logprobs = None
    if seq.logprobs is not None:
        logprobs = TokenLogprobs(token_id, -0.5, 1, np.array([]), np.array([]))
    seq.append_token(token_id, logprobs, now)


def test_streamed_outputs_carry_the_new_tokens_and_the_timings_so_far() -> None:
    request = _request("delta", logprobs=0)
    _advance(request, 40, 11.0)
    _advance(request, 41, 12.0)
    first = request.make_output()
    _advance(request, 42, 14.0)
    last = request.make_output()
    assert first is not None and last is not None
    assert (first.request_id, first.prompt, first.prompt_token_ids) == ("req-7", None, PROMPT)
    assert (first.finished, first.num_cached_tokens, first.error) == (False, 32, None)
    assert first.prompt_logprobs is None
    completion = first.outputs[0]
    assert (completion.index, completion.text, completion.token_ids) == (0, "", [40, 41])
    assert (completion.finish_reason, completion.stop_reason) == (None, None)
    assert completion.cumulative_logprob == -1.0
    assert [entry.token_id for entry in completion.logprobs or []] == [40, 41]
    assert first.metrics == RequestMetrics(0.5, 1.0, 1.0, 1, 10.0, None)
    assert last.finished and last.outputs[0].token_ids == [42]
    assert last.outputs[0].finish_reason == "length"
    assert last.metrics == RequestMetrics(0.5, 3.0, 1.0, 2, 10.0, 14.0)


def test_cumulative_and_final_outputs_carry_everything_so_far() -> None:
    cumulative, final = _request("cumulative"), _request("final_only")
    for token_id, now in ((40, 11.0), (41, 12.0)):
        _advance(cumulative, token_id, now)
        _advance(final, token_id, now)
    assert final.make_output() is None
    output = cumulative.make_output()
    assert output is not None and output.outputs[0].token_ids == [40, 41]
    assert output.outputs[0].cumulative_logprob is None and output.outputs[0].logprobs is None
    _advance(final, 42, 13.0)
    done = final.make_output()
    assert done is not None and done.finished and done.outputs[0].token_ids == [40, 41, 42]
    assert done.metrics.decode_tokens_per_second == 1.0
