"""The KV pool: sized by flags at startup, checked against the serving length, shared by
the prefix cache, and always in step with the pages of TVM's cache."""

from __future__ import annotations

import json
import random

import pytest
from engine_helpers import GREEDY, corpus_ids, token_ids

from vllm_tvm.runtime.kv.cache_config import (
    DeviceMemory,
    KVCacheSizeError,
    kv_memory_from_utilization,
)
from vllm_tvm.runtime.kv.kv_cache import COMPILED_PAGE_SIZE
from vllm_tvm.runtime.kv.prefix_cache import extend_block_hashes, hash_block
from vllm_tvm.runtime.sampling.params import SamplingParams


def test_default_pool_is_256_blocks_of_32_tokens(make_llm) -> None:
    llm = make_llm()
    config = llm.engine.cache_config
    assert (config.num_blocks, config.block_size, config.enable_prefix_caching) == (256, 32, True)
    assert llm.runner.kv_cache.available_pages() == 256 * 32 // COMPILED_PAGE_SIZE + 1


def test_explicit_max_model_len_beyond_the_pool_is_refused_naming_sizes_and_flags(
    make_llm,
) -> None:
    with pytest.raises(KVCacheSizeError) as refusal:
        make_llm(block_size=16, num_blocks=2, max_model_len=64)
    message = str(refusal.value)
    for fact in ("max_model_len 64", "4 KV blocks of 16", "2 blocks (32 tokens)", "--num-blocks"):
        assert fact in message
    assert "--max-model-len" in message


def test_unset_max_model_len_is_fitted_to_the_pool(make_llm) -> None:
    llm = make_llm(block_size=16, num_blocks=4)
    assert llm.engine.max_model_len == 64  # the tiny models allow 512


def test_kv_cache_memory_sizes_the_pool_in_whole_blocks(make_llm, tiny_model_dir) -> None:
    config = json.loads((tiny_model_dir("llama") / "config.json").read_text())
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    bytes_per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 4
    budget = 10 * 32 * bytes_per_token + 123
    llm = make_llm(kv_cache_memory=budget)
    assert llm.engine.cache_config.num_blocks == 10
    assert llm.runner.kv_cache.available_pages() == 10 * 2 + 1


def test_gpu_memory_utilization_below_what_is_in_use_is_refused(make_llm) -> None:
    with pytest.raises(KVCacheSizeError, match=r"gpu_memory_utilization 0\.0001"):
        make_llm(gpu_memory_utilization=0.0001)


def test_utilization_budget_is_the_share_minus_what_is_in_use() -> None:
    memory = DeviceMemory(total=1000, free=700)
    assert kv_memory_from_utilization(memory, 0.9) == 900 - 300


def test_two_ways_of_sizing_the_pool_are_refused(make_llm) -> None:
    with pytest.raises(ValueError, match="at most one of"):
        make_llm(num_blocks=8, kv_cache_memory=1 << 20)


def test_block_size_must_be_a_whole_number_of_kv_pages(make_llm) -> None:
    with pytest.raises(ValueError, match="multiple of the compiled KV page size 16, got 24"):
        make_llm(block_size=24)


def test_equal_prefixes_hash_equal_and_a_changed_block_changes_every_later_hash() -> None:
    tokens = list(range(64))
    changed = [*tokens[:16], 999, *tokens[17:]]
    first: list[bytes] = []
    second: list[bytes] = []
    extend_block_hashes(first, tokens, 16, 10)
    extend_block_hashes(second, changed, 16, 10)
    assert len(first) == 4  # only full blocks are hashed
    assert first[0] == second[0] == hash_block(None, tokens[:16])
    assert all(a != b for a, b in zip(first[1:], second[1:], strict=True))


def test_reset_prefix_cache_forgets_cached_blocks(make_llm) -> None:
    llm = make_llm(block_size=16)
    prompt = corpus_ids(llm)[:40]
    llm.generate(prompt, GREEDY)
    assert llm.engine.block_manager.num_cached_blocks > 0
    assert llm.reset_prefix_cache()
    assert llm.engine.block_manager.num_cached_blocks == 0
    assert llm.generate(prompt, GREEDY)[0].num_cached_tokens == 0


def test_least_recently_freed_cached_blocks_are_evicted_first(make_llm) -> None:
    llm = make_llm(block_size=16, num_blocks=7)
    ids = corpus_ids(llm)
    older, newer, filler = ids[0:40], ids[100:140], ids[200:230]
    for prompt in (older, newer):  # each leaves 3 cached blocks: 6 of 7 then
        llm.generate(prompt, GREEDY)
    llm.generate(filler, GREEDY)  # needs 3 blocks: the free one and 2 evicted
    manager = llm.engine.block_manager
    # The older prefix lost its last two blocks (a prefix's tail goes before its head).
    assert manager.cached_prefix_length(older) == 16
    assert manager.cached_prefix_length(newer) == 32


def test_random_traffic_under_a_tight_pool_keeps_tvm_pages_covering_free_blocks(
    make_llm,
) -> None:
    """Shared prefixes, n > 1, preemption, eviction and aborts: after every step TVM has at
    least the pages of every empty block, and greedy results equal an uncontended run."""
    rng = random.Random(0)
    roomy = make_llm(enable_prefix_caching=False)
    llm = make_llm(block_size=16, num_blocks=12, max_num_seqs=4)
    ids = corpus_ids(llm)
    heads = [ids[0:40], ids[100:133], ids[200:216]]
    prompts = [rng.choice(heads) + ids[300 + i : 300 + i + rng.randint(1, 20)] for i in range(14)]
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    expected = token_ids(roomy.generate(prompts, greedy))
    engine = llm.engine
    for index, prompt in enumerate(prompts):
        engine.add_request(str(index), prompt, greedy, output_kind="final_only")
    sampled = SamplingParams(n=2, temperature=1.0, seed=5, max_tokens=20, ignore_eos=True)
    engine.add_request("n2", heads[0], sampled, output_kind="final_only")
    engine.add_request("doomed", heads[1], greedy, output_kind="final_only")
    outputs = {}
    pages_per_block = 16 // COMPILED_PAGE_SIZE
    steps = 0
    while engine.has_unfinished:
        for output in engine.step():
            outputs[output.request_id] = output
        steps += 1
        if steps == 6:
            engine.abort_request("doomed")
        empty = engine.block_manager.num_empty_blocks
        assert llm.runner.kv_cache.available_pages() >= empty * pages_per_block + 1
    assert engine.metrics.snapshot().num_preemptions > 0
    assert [outputs[str(i)].outputs[0].token_ids for i in range(len(prompts))] == expected
    assert outputs["doomed"].outputs[0].finish_reason == "abort"
    assert len(outputs["n2"].outputs) == 2
