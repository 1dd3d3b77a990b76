"""A step is one forward: decode rows alone run the compiled decode, anything else one ragged
prefill in which decode rows are 1-token chunks; the tokens are those of separate runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from engine_helpers import GREEDY, prompts_of_lengths, token_ids

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.engine.intake import RequestIntake
from vllm_tvm.runtime.model.batch import prepare_batch
from vllm_tvm.runtime.requests.sequence import EngineSequence, ScheduledSequence
from vllm_tvm.runtime.sampling.params import SamplingParams


def _count_forwards(monkeypatch, llm: LLM) -> list[str]:
    """The runner's forwards, by name, as the engine calls them from now on."""
    calls: list[str] = []
    runner = llm.engine.runner
    for name in ("prefill_logits", "decode_logits"):
        forward: Callable[..., Any] = getattr(runner, name)

        def counted(*args: Any, _name: str = name, _forward=forward, **kwargs: Any) -> Any:
            calls.append(_name)
            return _forward(*args, **kwargs)

        monkeypatch.setattr(runner, name, counted)
    return calls


def test_a_mixed_step_runs_one_ragged_forward_and_gives_the_same_tokens(
    make_llm, monkeypatch
) -> None:
    llm = make_llm(enable_prefix_caching=False)  # "second" computes its prompt in full
    first, second = prompts_of_lengths(llm, [21, 34])
    expected = [token_ids(llm.generate(prompt, GREEDY))[0] for prompt in (first, second)]
    engine = llm.engine
    engine.add_request("first", first, GREEDY, output_kind="final_only")
    engine.step()  # the prefill of "first"
    engine.step()  # "first" decodes
    engine.add_request("second", second, GREEDY, output_kind="final_only")
    calls = _count_forwards(monkeypatch, llm)
    outputs = engine.step()  # "first" decodes while "second" prefills
    assert calls == ["prefill_logits"]
    while engine.has_unfinished:
        outputs.extend(engine.step())
    by_id = {output.request_id: output for output in outputs}
    assert token_ids([by_id["first"], by_id["second"]]) == expected


def test_a_step_of_decode_rows_alone_runs_the_decode_forward(make_llm, monkeypatch) -> None:
    llm = make_llm()
    engine = llm.engine
    for index, prompt in enumerate(prompts_of_lengths(llm, [12, 17, 9])):
        engine.add_request(str(index), prompt, GREEDY)
    engine.step()  # the three prefills, in one forward
    calls = _count_forwards(monkeypatch, llm)
    engine.step()
    assert calls == ["decode_logits"]
    while engine.has_unfinished:
        engine.step()


# ---- the batch layout, without a model ----

VOCAB = 100


def _sequence(prompt_len: int, computed: int, **params: Any) -> EngineSequence:
    intake = RequestIntake(None, [], max_model_len=64, vocab_size=VOCAB)
    request = intake.make_request(list(range(1, prompt_len + 1)), SamplingParams(**params))
    [seq] = request.seqs
    seq.kv_id, seq.num_computed_tokens = 1000 + prompt_len, computed
    return seq


def _decoding(prompt_len: int) -> EngineSequence:
    """A sequence that sampled one token, which the next step computes."""
    seq = _sequence(prompt_len, prompt_len)
    seq.token_ids.append(7)
    return seq


def test_decode_rows_alone_make_a_decode_batch() -> None:
    seqs = [_decoding(5), _decoding(8)]
    batch = prepare_batch([ScheduledSequence(seq, 1) for seq in seqs])
    assert batch.is_decode
    assert batch.token_ids == [7, 7] and batch.chunk_lengths == [1, 1]
    assert batch.sampling_seqs == seqs and batch.sampling_rows == [0, 1]


def test_a_mixed_batch_puts_prefill_chunks_first_and_decode_rows_as_one_token_chunks() -> None:
    decoding, whole, partial = _decoding(5), _sequence(4, 0), _sequence(10, 2)
    scheduled = [
        ScheduledSequence(decoding, 1),
        ScheduledSequence(whole, 4),
        ScheduledSequence(partial, 3),  # positions 2..4 of 10: no logits needed
    ]
    batch = prepare_batch(scheduled)
    assert not batch.is_decode
    assert batch.kv_ids == [whole.kv_id, partial.kv_id, decoding.kv_id]
    assert batch.token_ids == [1, 2, 3, 4, 3, 4, 5, 7]
    assert batch.chunk_lengths == [4, 3, 1]
    assert batch.logit_positions == [3, 7]
    assert batch.sampling_seqs == [whole, decoding] and batch.sampling_rows == [0, 1]


def test_a_chunk_wanting_prompt_logprobs_gets_a_row_per_position() -> None:
    wanting, decoding = _sequence(6, 0, prompt_logprobs=1), _decoding(3)
    batch = prepare_batch([ScheduledSequence(wanting, 6), ScheduledSequence(decoding, 1)])
    assert batch.logit_positions == [0, 1, 2, 3, 4, 5, 6]
    [rows] = batch.prompt_logprob_rows
    assert (rows.seq, rows.start, rows.first_row, rows.end_row) == (wanting, 0, 0, 6)
    assert batch.sampling_rows == [5, 6]


@pytest.mark.parametrize("computed", [0, 3])
def test_chunks_that_finish_no_sequence_still_ask_for_one_row(computed: int) -> None:
    seq = _sequence(20, computed)
    batch = prepare_batch([ScheduledSequence(seq, 5)])
    assert batch.logit_positions == [4]
    assert batch.sampling_seqs == []
