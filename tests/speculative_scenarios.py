"""The engine runs every method that drafts with a model must pass, written once: greedy
tokens equal plain decoding (batched, with prefix-cache hits), sampled outputs follow the
plain distribution (chi-square); and for the heads that draft from the target's hidden
states (EAGLE, EAGLE-3, MTP) the factory of their LLMs, an echo head over a repeating target
whose every draft is accepted (with and without preemption), and their empty caches at the
end. The head runs return the LLMs they made for the method's own checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from engine_helpers import assert_all_blocks_free, prompts_of_lengths, token_ids
from test_speculative_engine import MIXED_LENGTHS, _homogeneity_p_value

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

MakeLLM = Callable[..., LLM]
"""`make(target, head, k=3, **options)`: an LLM on the CPU, drafting with `head` (None:
plain decoding)."""


@contextmanager
def head_llms(method: str) -> Iterator[MakeLLM]:
    """A factory of LLMs drafting with heads of `method`; once the block is left, every one
    of them must have all its blocks free."""
    made: list[LLM] = []

    def make(target: Path, head: Path | None, k: int = 3, **options) -> LLM:
        if head is not None:
            spec = {"method": method, "model": str(head), "num_speculative_tokens": k}
            options["speculative_config"] = spec
        made.append(LLM(target, device="cpu", show_progress=False, **options))
        return made[-1]

    yield make
    for llm in made:
        assert_all_blocks_free(llm)


def assert_head_cache_empty(llm: LLM) -> None:
    """Every sequence ended: the head holds no KV sequence, no target hidden state is kept."""
    proposer = llm.engine.speculator.draft
    config = proposer.runner.kv_config
    assert proposer.num_sequences == 0 and proposer.store.num_sequences == 0
    pages = proposer.runner.kv_cache.available_pages()
    assert pages == -(-config.max_total_seq_len // config.page_size) + 1


def greedy_tokens_unchanged(plain: LLM, speculative: LLM) -> None:
    """`speculative`'s greedy tokens equal `plain`'s (batched prompts of mixed lengths), its
    drafts partly rejected, and again over prefix-cache hits (the prefix cache holds only
    committed tokens; a head's target computed no hidden state there)."""
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    prompts = prompts_of_lengths(plain, MIXED_LENGTHS)
    expected = token_ids(plain.generate(prompts, params))
    assert token_ids(speculative.generate(prompts, params)) == expected
    stats = speculative.engine.metrics.snapshot()
    assert stats.spec_decode_num_drafts > 0
    assert stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    again = speculative.generate(prompts, params)
    assert token_ids(again) == expected and sum(o.num_cached_tokens for o in again) > 0


def random_head_changes_no_greedy_token(make: MakeLLM, target: Path, head: Path) -> tuple[LLM, LLM]:
    """`greedy_tokens_unchanged` with `head` (k = 4); the plain and the speculative LLM."""
    plain = make(target, None, block_size=16)
    speculative = make(target, head, k=4, block_size=16)
    greedy_tokens_unchanged(plain, speculative)
    assert_head_cache_empty(speculative)
    return plain, speculative


def echo_head_is_always_accepted(
    make: MakeLLM, repeating: Path, echo: Path, preempted: bool
) -> LLM:
    """Over a target that repeats its last token, every draft of the echo head (k = 3) is
    accepted, many at once, and the tokens equal plain decoding."""
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    sizes = {"block_size": 16, "num_blocks": 8} if preempted else {}
    plain = make(repeating, None)
    prompts = prompts_of_lengths(plain, [20, 18, 22, 19] if preempted else MIXED_LENGTHS)
    expected = token_ids(plain.generate(prompts, params))
    assert all(len(set(tokens)) == 1 for tokens in expected)  # the target repeats
    speculative = make(repeating, echo, **sizes)
    assert token_ids(speculative.generate(prompts, params)) == expected
    stats = speculative.engine.metrics.snapshot()
    assert stats.num_preemptions > 0 if preempted else stats.num_preemptions == 0
    assert 0 < stats.spec_decode_num_accepted_tokens == stats.spec_decode_num_draft_tokens
    assert stats.spec_decode_num_accepted_tokens_per_pos[2] > 0
    assert stats.mean_acceptance_length > 3
    assert_head_cache_empty(speculative)
    return speculative


SAMPLES = 400
"""Sampled continuations of one prompt per engine in `sampling_follows_plain`."""


def sampling_follows_plain(plain: LLM, speculative: LLM) -> list[list[tuple[int, ...]]]:
    """SAMPLES sampled continuations of one prompt with `speculative` are distributed as
    `plain`'s (some drafts rejected); the two runs' continuations."""
    params = SamplingParams(temperature=1.0, top_k=2, max_tokens=4, ignore_eos=True, n=SAMPLES)
    prompt = prompts_of_lengths(plain, [10])[0]
    runs = [
        [tuple(c.token_ids) for c in llm.generate(prompt, params)[0].outputs]
        for llm in (plain, speculative)
    ]
    assert _homogeneity_p_value(*runs) > 1e-4
    stats = speculative.engine.metrics.snapshot()
    assert stats.spec_decode_num_accepted_tokens < stats.spec_decode_num_draft_tokens
    return runs


def head_sampling_follows_plain(make: MakeLLM, target: Path, head: Path, echo: bool) -> None:
    """`sampling_follows_plain` with `head`; an echo head over a repeating target has some
    of its drafts accepted."""
    plain = make(target, None, seed=1)
    speculative = make(target, head, seed=2)
    sampling_follows_plain(plain, speculative)
    if echo:
        assert speculative.engine.metrics.snapshot().spec_decode_num_accepted_tokens > 0
