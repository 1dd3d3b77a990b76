"""What the speculative tests on image models share: the sampling they run (greedy, each
token's log-probability) and the check that a batch of image and text requests, drafted
and verified together, gives transformers' greedy tokens and per-step log-probabilities.
The log-probabilities move with the positions and the attention pattern where the tiny
models' tokens hardly do, so they catch a verify forward that runs without the step's
images, at the wrong M-RoPE positions or with a different mask than decode."""

from __future__ import annotations

import numpy as np
from engine_helpers import run_to_completion, step_finished

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

SpeculativeRequest = tuple[list[int], list, tuple[list[int], np.ndarray]]
"""(prompt ids, images, transformers' greedy tokens and their log-probabilities)."""


def greedy_with_logprobs(new_tokens: int) -> SamplingParams:
    """Greedy sampling of `new_tokens` tokens, never stopping early, each token's
    log-probability returned."""
    return SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True, logprobs=0)


def assert_batch_equals_oracle(
    llm: LLM, requests: list[SpeculativeRequest], new_tokens: int, k: int, join_after: int = 0
) -> tuple[int, int]:
    """All `requests` through the speculative `llm`, together: each one's tokens equal
    transformers' and every step's log-probability is within 1e-4; drafts were made, `k` a
    step. With `join_after`, each request after the first joins that many engine steps
    after the one before, so its prefill (with its images) shares a forward with the
    others' verify chunks. Returns the
    steps drafted and the drafts accepted in this run, for the method's own checks."""
    params = greedy_with_logprobs(new_tokens)
    before = llm.engine.metrics.snapshot()
    request_ids, finished = [], {}
    for ids, images, _ in requests:
        if request_ids:
            for _ in range(join_after):
                finished.update(step_finished(llm))
        request_ids.append(llm.engine.add_request(None, ids, params, images=images))
    finished.update(run_to_completion(llm))
    for request_id, (_, _, (tokens, logprobs)) in zip(request_ids, requests, strict=True):
        ours = finished[request_id].outputs[0]
        assert ours.token_ids == tokens
        ours_logprobs = [entry.logprob for entry in ours.logprobs]
        np.testing.assert_allclose(ours_logprobs, logprobs, atol=1e-4, rtol=0)
    after = llm.engine.metrics.snapshot()
    assert len(after.spec_decode_num_accepted_tokens_per_pos) == k
    drafts = after.spec_decode_num_drafts - before.spec_decode_num_drafts
    assert drafts > 0
    return drafts, after.spec_decode_num_accepted_tokens - before.spec_decode_num_accepted_tokens
