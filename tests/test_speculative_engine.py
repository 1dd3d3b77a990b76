"""Speculative decoding never changes what the engine outputs: under greedy sampling every
request gets the same tokens with drafts as without (batched, chunked, preempted, with
prefix-cache hits, stop rules and logits hooks in the mix), and sampled outputs follow the
same distribution (two-sample chi-square). An oracle proposer that drafts the known greedy
continuation with planted mistakes makes every path run: all drafts accepted plus the bonus
token, partial acceptance with KV rollback, and rejection of the first draft."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
import torch
from engine_helpers import prompts_of_lengths, token_ids
from tiny_models import TINY_MODELS

from vllm_tvm.runtime.sampling.params import SamplingParams

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1}
MIXED_LENGTHS = [3, 70, 9, 41, 17, 1, 64, 28]


class OracleProposer:
    """Drafts the known continuation of each prompt, with every `wrong_every`-th position
    drafted wrong (so that drafts are accepted, cut short and rejected)."""

    def __init__(self, expected: dict[tuple[int, ...], list[int]], wrong_every: int = 7):
        self.expected = expected
        self.wrong_every = wrong_every

    def propose(self, tokens: Sequence[int], max_tokens: int) -> list[int]:
        for prompt, output in self.expected.items():
            if tuple(tokens[: len(prompt)]) == prompt and len(tokens) - len(prompt) < len(output):
                done = len(tokens) - len(prompt)
                drafts = output[done : done + max_tokens]
                return [
                    token + 1 if (len(tokens) + i) % self.wrong_every == 0 else token
                    for i, token in enumerate(drafts)
                ]
        return []


def with_oracle(llm, prompts: list[list[int]], outputs: list[list[int]], wrong_every: int = 7):
    """`llm` with its proposer replaced by an oracle for `prompts` -> `outputs`."""
    expected = {tuple(p): o for p, o in zip(prompts, outputs, strict=True)}
    llm.engine.speculator.proposer = OracleProposer(expected, wrong_every)
    return llm


def spec_stats(llm):
    return llm.engine.metrics.snapshot()


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
def test_ngram_greedy_equals_no_speculation(name: str, make_llm) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    plain = make_llm(name)
    prompts = prompts_of_lengths(plain, MIXED_LENGTHS)
    expected = token_ids(plain.generate(prompts, params))
    speculative = make_llm(name, speculative_config=NGRAM)
    assert token_ids(speculative.generate(prompts, params)) == expected
    assert spec_stats(speculative).spec_decode_num_draft_tokens > 0


def test_oracle_drafts_accepted_cut_and_rejected_equal_no_speculation(make_llm) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=45, ignore_eos=True)
    plain = make_llm(block_size=16)
    prompts = prompts_of_lengths(plain, MIXED_LENGTHS)
    expected = token_ids(plain.generate(prompts, params))
    speculative = with_oracle(make_llm(block_size=16, speculative_config=NGRAM), prompts, expected)
    assert token_ids(speculative.generate(prompts, params)) == expected
    stats = spec_stats(speculative)
    per_pos = stats.spec_decode_num_accepted_tokens_per_pos
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    assert per_pos[0] > per_pos[3] > 0  # whole drafts and drafts cut short
    assert stats.spec_decode_num_drafts > per_pos[0]  # and drafts rejected at once
    assert 1 < stats.mean_acceptance_length < 5
    # the prefix cache holds only committed tokens: a second run hits it and still agrees
    again = speculative.generate(prompts, params)
    assert token_ids(again) == expected and sum(o.num_cached_tokens for o in again) > 0


def test_preempted_with_drafts_equals_no_speculation(make_llm) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    plain = make_llm()
    prompts = prompts_of_lengths(plain, [20, 18, 22, 19])
    expected = token_ids(plain.generate(prompts, params))
    tight = with_oracle(
        make_llm(block_size=16, num_blocks=8, speculative_config=NGRAM), prompts, expected
    )
    assert token_ids(tight.generate(prompts, params)) == expected
    stats = spec_stats(tight)
    assert stats.num_preemptions > 0 and stats.spec_decode_num_accepted_tokens > 0


def test_chunked_prefill_next_to_drafts_equals_no_speculation(make_llm) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    plain = make_llm()
    prompts = prompts_of_lengths(plain, [45, 23, 60, 5])
    expected = token_ids(plain.generate(prompts, params))
    chunked = with_oracle(
        make_llm(max_num_batched_tokens=16, speculative_config=NGRAM), prompts, expected
    )
    assert token_ids(chunked.generate(prompts, params)) == expected
    assert spec_stats(chunked).spec_decode_num_accepted_tokens > 0


def test_stop_rules_see_every_committed_token(make_llm) -> None:
    plain = make_llm()
    prompts = prompts_of_lengths(plain, [12, 30, 7])
    free = token_ids(
        plain.generate(prompts, SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    )
    stop_id = free[0][9]  # a token drafted in the middle of an accepted run
    cases = [
        SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, stop_token_ids=[stop_id]),
        SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True),
        SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True, stop=["e"]),
        SamplingParams(temperature=0.0, max_tokens=25, min_tokens=20, logprobs=2),
    ]
    speculative = with_oracle(make_llm(speculative_config=NGRAM), prompts, free, wrong_every=5)
    for params in cases:
        expected = plain.generate(prompts, params)
        got = speculative.generate(prompts, params)
        for want, have in zip(expected, got, strict=True):
            a, b = want.outputs[0], have.outputs[0]
            assert (b.token_ids, b.text, b.finish_reason) == (a.token_ids, a.text, a.finish_reason)
            assert b.stop_reason == a.stop_reason
            if a.logprobs is not None:
                assert [e.token_id for e in b.logprobs] == [e.token_id for e in a.logprobs]
                np.testing.assert_allclose(
                    [e.logprob for e in b.logprobs], [e.logprob for e in a.logprobs], atol=1e-4
                )
    assert spec_stats(speculative).spec_decode_num_accepted_tokens > 0


class BanTokens:
    """A logits hook masking `banned` in the rows of the requests it constrains."""

    def __init__(self, request_id: str, banned: list[int]) -> None:
        self.request_id = request_id
        self.banned = banned

    def constrains(self, seq) -> bool:
        return seq.request_id == self.request_id

    def __call__(self, seqs, logits: np.ndarray) -> None:
        for row, seq in enumerate(seqs):
            if self.constrains(seq):
                logits[row, self.banned] = -np.inf


def test_rows_a_logits_hook_masks_are_not_drafted(make_llm) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    plain = make_llm()
    prompts = prompts_of_lengths(plain, [15, 26])
    free = token_ids(plain.generate(prompts, params))
    banned = sorted(set(free[0][3:]))  # changes the constrained request's continuation
    speculative = with_oracle(make_llm(speculative_config=NGRAM), prompts, free)
    outputs = []
    for llm in (plain, speculative):
        llm.engine.logits_hooks.append(BanTokens("constrained", banned))
        engine = llm.engine
        engine.add_request("constrained", prompts[0], params, output_kind="final_only")
        engine.add_request("free", prompts[1], params, output_kind="final_only")
        done = [out for _ in range(200) if engine.has_unfinished for out in engine.step()]
        outputs.append({out.request_id: out.outputs[0].token_ids for out in done})
    assert outputs[0] == outputs[1]
    assert outputs[1]["free"] == free[1] and not set(outputs[1]["constrained"][3:]) & set(banned)
    assert spec_stats(speculative).spec_decode_num_accepted_tokens > 0


def _homogeneity_p_value(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> float:
    """Pearson's chi-square test that two samples come from one distribution (categories
    expected below 5 in either sample pooled)."""
    counts_a, counts_b = Counter(a), Counter(b)
    categories = sorted(set(counts_a) | set(counts_b))
    table = np.array([[counts_a[c], counts_b[c]] for c in categories], dtype=np.float64)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0) / table.sum()
    small = expected.min(axis=1) < 5
    if small.any():
        table = np.vstack([table[~small], table[small].sum(axis=0)])
        expected = np.vstack([expected[~small], expected[small].sum(axis=0)])
    statistic = float(((table - expected) ** 2 / expected).sum())
    dof = len(table) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(statistic / 2.0)))


def test_sampled_outputs_follow_the_distribution_without_speculation(make_llm) -> None:
    samples = 400
    params = SamplingParams(temperature=1.0, top_k=2, max_tokens=4, ignore_eos=True, n=samples)
    plain = make_llm(seed=1)
    prompt = prompts_of_lengths(plain, [10])[0]
    greedy_params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    greedy = token_ids(plain.generate(prompt, greedy_params))[0]
    speculative = make_llm(seed=2, speculative_config=NGRAM)

    class Likeliest:  # drafts the greedy tokens after the first output token, whatever it is
        def propose(self, tokens: Sequence[int], max_tokens: int) -> list[int]:
            done = len(tokens) - len(prompt)
            return greedy[done : done + max_tokens]

    speculative.engine.speculator.proposer = Likeliest()
    runs = [
        [tuple(c.token_ids) for c in llm.generate(prompt, params)[0].outputs]
        for llm in (plain, speculative)
    ]
    assert _homogeneity_p_value(*runs) > 1e-4
    stats = spec_stats(speculative)
    assert 0 < stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    # the test tells apart a sampler that always took the draft
    assert _homogeneity_p_value(runs[0], [tuple(greedy)] * samples) < 1e-4


def test_a_prompt_cached_up_to_its_last_token_is_timed_from_its_first_token(make_llm) -> None:
    """A prefix hit leaves only the prompt's last token to compute, a step that looks like
    a decode row: its sample is the first output token, counted as such, never a draft."""
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    plain = make_llm(block_size=16)
    prompts = prompts_of_lengths(plain, [17, 33])
    expected = token_ids(plain.generate(prompts, params))
    speculative = with_oracle(make_llm(block_size=16, speculative_config=NGRAM), prompts, expected)
    speculative.generate(prompts, params)
    again = speculative.generate(prompts, params)
    assert [o.num_cached_tokens for o in again] == [16, 32]
    assert token_ids(again) == expected
    stats = spec_stats(speculative)
    assert stats.time_to_first_token.count == 4 and stats.prompt_tokens == 2 * (17 + 33)
    assert stats.spec_decode_num_accepted_tokens > 0
