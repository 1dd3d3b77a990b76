"""Async scheduling (`async_scheduling=True`): each forward is launched before the previous
step's text and outputs are made, and every request gets exactly what the synchronous engine
gives it.

The oracle is the synchronous engine on the same tiny model (itself checked against
transformers elsewhere): the same requests, streamed as deltas, must produce the same tokens,
text, finish reasons and stop reasons, through stop strings found one forward late, stop ids
under `min_tokens`, seeded sampling, preemption, prefix hits, `n` > 1 and aborts, with every
block freed at the end. The order of work is checked too: under async scheduling the text
of a decode token is rendered after the next forward was launched, and a first token is
handed out before any further forward starts.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from typing import Any

import pytest
from engine_helpers import prompts_of_lengths

from vllm_tvm.cli.engine_args import add_engine_arguments, engine_args_from_cli
from vllm_tvm.runtime.engine.args import ASYNC_WITH_SPECULATION, EngineArgs
from vllm_tvm.runtime.requests.sequence import EngineSequence
from vllm_tvm.runtime.sampling.params import SamplingParams


def run_streamed(llm: Any, requests: list[tuple[list[int], SamplingParams]]) -> dict[str, Any]:
    """Every request's concatenated deltas: tokens, text, finish and stop reasons."""
    engine = llm.engine
    for index, (prompt, params) in enumerate(requests):
        engine.add_request(f"r{index}", prompt, params, output_kind="delta")
    got: dict[str, Any] = defaultdict(lambda: defaultdict(lambda: {"ids": [], "text": ""}))
    while engine.has_unfinished:
        for output in engine.step():
            for completion in output.outputs:
                entry = got[output.request_id][completion.index]
                entry["ids"] += completion.token_ids
                entry["text"] += completion.text
                if output.finished:
                    entry["end"] = (completion.finish_reason, completion.stop_reason)
    return {rid: dict(entries) for rid, entries in got.items()}


@pytest.fixture
def pair(make_llm):
    """A synchronous and an async-scheduling LLM on the same tiny model."""
    return make_llm("llama"), make_llm("llama", async_scheduling=True)


def test_greedy_streams_equal_the_synchronous_engine(pair) -> None:
    sync, overlapped = pair
    prompts = prompts_of_lengths(sync, [5, 17, 9, 30, 3])
    requests = [
        (prompt, SamplingParams(temperature=0.0, max_tokens=4 + 3 * i, ignore_eos=True))
        for i, prompt in enumerate(prompts)
    ]
    expected = run_streamed(sync, requests)
    assert run_streamed(overlapped, requests) == expected
    assert all(e[0]["end"] == ("length", None) for e in expected.values())


def test_stop_strings_found_a_forward_late_cut_the_same_text(pair) -> None:
    sync, overlapped = pair
    prompts = prompts_of_lengths(sync, [7, 12, 20])
    free = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    texts = [e[0]["text"] for e in run_streamed(sync, [(p, free) for p in prompts]).values()]
    stops = [text[len(text) // 2 : len(text) // 2 + 3] for text in texts]
    assert all(stop.strip() for stop in stops), texts
    requests = [
        (prompt, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, stop=[stop]))
        for prompt, stop in zip(prompts, stops, strict=True)
    ]
    expected = run_streamed(sync, requests)
    assert [e[0]["end"][0] for e in expected.values()] == ["stop"] * 3
    assert run_streamed(overlapped, requests) == expected


def test_stop_ids_and_min_tokens_count_every_token(pair) -> None:
    sync, overlapped = pair
    prompt = prompts_of_lengths(sync, [11])[0]
    free = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    ids = run_streamed(sync, [(prompt, free)])["r0"][0]["ids"]
    stop_id = ids[2]  # appears early: min_tokens decides whether it may stop the request
    requests = [
        (prompt, SamplingParams(temperature=0.0, max_tokens=16, stop_token_ids=[stop_id])),
        (
            prompt,
            SamplingParams(temperature=0.0, max_tokens=16, stop_token_ids=[stop_id], min_tokens=6),
        ),
    ]
    expected = run_streamed(sync, requests)
    assert expected["r0"][0]["end"] == ("stop", stop_id)
    assert len(expected["r1"][0]["ids"]) > len(expected["r0"][0]["ids"])
    assert run_streamed(overlapped, requests) == expected


def test_seeded_sampling_n_and_prefix_hits_equal_the_synchronous_engine(pair) -> None:
    sync, overlapped = pair
    shared = prompts_of_lengths(sync, [40])[0]
    requests = [
        (shared, SamplingParams(temperature=0.9, top_p=0.9, max_tokens=10, seed=5, n=2)),
        ([*shared[:35], 7, 8], SamplingParams(temperature=0.0, max_tokens=9, ignore_eos=True)),
        (shared, SamplingParams(temperature=0.7, max_tokens=12, seed=11, ignore_eos=True)),
    ]
    expected = run_streamed(sync, requests)
    assert len(expected["r0"]) == 2
    assert run_streamed(overlapped, requests) == expected
    assert overlapped.engine.block_manager.num_cached_blocks > 0


def test_preemption_under_a_small_pool_gives_the_same_tokens(make_llm) -> None:
    sync = make_llm("llama", num_blocks=6, block_size=16)
    overlapped = make_llm("llama", num_blocks=6, block_size=16, async_scheduling=True)
    prompts = prompts_of_lengths(sync, [20, 25, 18, 22])
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    requests = [(prompt, params) for prompt in prompts]
    expected = run_streamed(sync, requests)
    preempted_before = overlapped.engine.metrics.snapshot().num_preemptions
    assert run_streamed(overlapped, requests) == expected
    assert overlapped.engine.metrics.snapshot().num_preemptions > preempted_before


def test_an_abort_while_a_forward_is_in_flight_frees_everything(pair) -> None:
    _, overlapped = pair
    engine = overlapped.engine
    prompts = prompts_of_lengths(overlapped, [9, 14])
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    for index, prompt in enumerate(prompts):
        engine.add_request(f"a{index}", prompt, params, output_kind="delta")
    finished: dict[str, str] = {}
    steps = 0
    while engine.has_unfinished:
        steps += 1
        if steps == 5:
            assert engine._launched is not None  # a forward is in flight
            assert engine.abort_request("a0")
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = output.outputs[0].finish_reason
    assert finished == {"a0": "abort", "a1": "length"}


def test_decode_text_is_rendered_after_the_next_forward_is_launched(pair, monkeypatch) -> None:
    _, overlapped = pair
    events: list[tuple[str, int]] = []
    runner = overlapped.engine.runner
    decode = runner.decode_logits
    prefill = runner.prefill_logits
    render = EngineSequence.render_token

    def traced_decode(seq_ids, token_ids):
        events.append(("forward", 1))
        return decode(seq_ids, token_ids)

    def traced_prefill(seq_ids, chunks, logit_positions=None):
        events.append(("forward", 0))
        return prefill(seq_ids, chunks, logit_positions)

    def traced_render(seq, token_id, now):
        events.append(("render", len(seq.output_token_ids)))
        return render(seq, token_id, now)

    monkeypatch.setattr(runner, "decode_logits", traced_decode)
    monkeypatch.setattr(runner, "prefill_logits", traced_prefill)
    monkeypatch.setattr(EngineSequence, "render_token", traced_render)
    prompt = prompts_of_lengths(overlapped, [10])[0]
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    overlapped.engine.add_request("t", prompt, params, output_kind="delta")
    per_call: list[list[tuple[str, int]]] = []
    while overlapped.engine.has_unfinished:
        events.clear()
        overlapped.engine.step()
        per_call.append(list(events))
    # prefill; first token out at once (no forward); then each call launches the forward of
    # the next token before rendering the text of the one just sampled; the fifth token
    # ends the request by length and is rendered at once.
    assert per_call == [
        [("forward", 0)],
        [("render", 1)],
        [("forward", 1)],
        [("forward", 1), ("render", 2)],
        [("forward", 1), ("render", 3)],
        [("forward", 1), ("render", 4)],
        [("render", 5)],
    ]


def test_defaults_flags_and_the_refusal_with_speculation() -> None:
    assert EngineArgs(model="m").overlaps_steps is False
    assert EngineArgs(model="m", device="cuda").overlaps_steps is True
    assert EngineArgs(model="m", device="cuda", async_scheduling=False).overlaps_steps is False
    assert EngineArgs(model="m", async_scheduling=True).overlaps_steps is True
    ngram = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}
    speculative = EngineArgs(model="m", device="cuda", speculative_config=ngram)
    assert speculative.overlaps_steps is False
    with pytest.raises(ValueError, match=re.escape(ASYNC_WITH_SPECULATION)):
        EngineArgs(model="m", async_scheduling=True, speculative_config=ngram)
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    for flags, expected in (
        ([], None),
        (["--async-scheduling"], True),
        (["--no-async-scheduling"], False),
    ):
        args = engine_args_from_cli(parser.parse_args(["--model", "m", *flags]))
        assert args.async_scheduling is expected
