"""Tensor parallelism over two ranks on the CPU (disco worker threads, the CPU CCL): the
sharding plan, sliced checkpoint reads, and generation equal to transformers'.

Oracle: transformers on the same tiny checkpoints (fp32). The GQA model (4 q / 2 KV heads)
splits its KV heads; the one-KV-head model replicates its head on both ranks.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from tiny_models import load_oracle

from vllm_tvm.checkpoints.model_config import read_model_config
from vllm_tvm.checkpoints.safetensors_weights import SafetensorsWeights
from vllm_tvm.checkpoints.shard_slices import rank_reader
from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.model_defs.config import parse_llama_family_config
from vllm_tvm.model_defs.llama import fused_weight_sources
from vllm_tvm.model_defs.tensor_parallel import (
    TensorParallelError,
    manifest_plan,
    rank_widths,
    source_shard,
    with_shards,
)
from vllm_tvm.runtime.sampling.params import SamplingParams

PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over",
    "Beautiful is better than ugly. Explicit is better than implicit.",
]
NEW_TOKENS = 40
SPLIT_MODELS = ["llama", "llama_one_kv_head"]


def _split_config(model_dir, shards: int = 2):
    return with_shards(parse_llama_family_config(read_model_config(model_dir)), shards)


def _checkpoint_plan(model_dir, shards: int = 2) -> dict:
    """The manifest plan of every parameter the checkpoint's Llama has (HF names)."""
    config = _split_config(model_dir, shards)
    names = [name for name in SafetensorsWeights(model_dir).names() if "_proj." not in name]
    for layer in range(config.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        names += [prefix + "self_attn.qkv_proj.weight", prefix + "self_attn.o_proj.weight"]
        names += [prefix + "mlp.gate_up_proj.weight", prefix + "mlp.down_proj.weight"]
    return manifest_plan({name: fused_weight_sources(name)[0] for name in names}, config)


@pytest.fixture(scope="module")
def split_llms(tiny_model_dir):
    """Each split model's LLM over two ranks (compiled once per run)."""
    return {
        name: LLM(tiny_model_dir(name), device="cpu", tensor_parallel_size=2, show_progress=False)
        for name in SPLIT_MODELS
    }


def test_rank_widths_split_or_replicate_kv_heads(tiny_model_dir) -> None:
    gqa = rank_widths(_split_config(tiny_model_dir("llama")))
    assert (gqa.q_heads, gqa.kv_heads, gqa.intermediate_size) == (2, 1, 64)
    config = _split_config(tiny_model_dir("llama_one_kv_head"))
    assert rank_widths(config).kv_heads == 1
    head_dim = config.head_dim
    shard = source_shard("model.layers.0.self_attn.k_proj.weight", config)
    assert shard.segments == ((0, head_dim), (0, head_dim))  # the one head on both ranks


@pytest.mark.parametrize("name", SPLIT_MODELS)
def test_rank_slices_concatenate_to_the_full_tensors(name: str, tiny_model_dir) -> None:
    model_dir = tiny_model_dir(name)
    plan = _checkpoint_plan(model_dir)
    checked = 0
    for entries in plan["params"].values():
        for entry in entries:
            source = entry["source"]
            full = SafetensorsWeights(model_dir).get(source)
            parts = [rank_reader(plan, SafetensorsWeights(model_dir), r)(source) for r in (0, 1)]
            if entry["axis"] is None:
                assert all(np.array_equal(part, full) for part in parts)
            elif ("k_proj" in source or "v_proj" in source) and name == "llama_one_kv_head":
                assert all(np.array_equal(part, full) for part in parts)  # replicated head
            else:
                assert np.array_equal(np.concatenate(parts, axis=entry["axis"]), full)
                checked += 1
    split_per_layer = 7 if name == "llama" else 5  # q, o, gate, up, down (and k, v)
    assert checked == 2 * split_per_layer


def test_a_rank_reads_only_its_slices(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("llama")
    plan = _checkpoint_plan(model_dir)
    source = SafetensorsWeights(model_dir)
    read = rank_reader(plan, source, 1)
    down = "model.layers.0.mlp.down_proj.weight"
    q = "model.layers.1.self_attn.q_proj.weight"
    for name in (down, q):
        before = source.slice_bytes_read
        part = read(name)
        assert source.slice_bytes_read - before == part.nbytes == source.get(name).nbytes // 2
    assert np.array_equal(read(down), source.get(down)[:, 64:])


def test_the_manifest_records_the_plan(split_llms) -> None:
    manifest = split_llms["llama"].runner.manifest
    assert manifest.tensor_parallel["shards"] == 2
    qkv = manifest.tensor_parallel["params"]["model.layers.0.self_attn.qkv_proj.weight"]
    assert [(e["source"].split(".")[-2], e["axis"], e["segments"]) for e in qkv] == [
        ("q_proj", 0, [[0, 32], [32, 64]]),
        ("k_proj", 0, [[0, 16], [16, 32]]),
        ("v_proj", 0, [[0, 16], [16, 32]]),
    ]
    shapes = {entry.name: entry.shape for entry in manifest.params}
    assert shapes["model.layers.0.self_attn.qkv_proj.weight"] == [64, 64]  # one rank's rows
    assert shapes["model.layers.0.mlp.down_proj.weight"] == [64, 64]


def _assert_greedy_equals_transformers(llm: LLM, model_dir) -> None:
    oracle = load_oracle(model_dir)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    for output in llm.generate(PROMPTS, params):
        ids = output.prompt_token_ids
        with torch.no_grad():
            expected = oracle.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS)
        assert output.outputs[0].token_ids == expected[0, len(ids) :].tolist()


@pytest.mark.parametrize("name", SPLIT_MODELS)
def test_greedy_tokens_equal_transformers(name: str, split_llms, tiny_model_dir) -> None:
    _assert_greedy_equals_transformers(split_llms[name], tiny_model_dir(name))


def test_split_q_k_v_biases_and_tied_embeddings_equal_transformers(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("qwen2_tied_bias")
    llm = LLM(model_dir, device="cpu", tensor_parallel_size=2, show_progress=False)
    _assert_greedy_equals_transformers(llm, model_dir)


@pytest.mark.parametrize("name", SPLIT_MODELS)
def test_prefill_logits_within_1e_4_of_transformers(name: str, split_llms, tiny_model_dir) -> None:
    llm = split_llms[name]
    ids = llm.tokenizer.encode(PROMPTS[2])
    logits = _prefill_logits(llm, ids)
    with torch.no_grad():
        expected = load_oracle(tiny_model_dir(name))(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(logits - expected).max() <= 1e-4


def test_unsplittable_models_are_refused_by_name(tiny_model_dir) -> None:
    config = parse_llama_family_config(read_model_config(tiny_model_dir("llama")))
    with pytest.raises(TensorParallelError, match="Phi3ForCausalLM"):
        with_shards(dataclasses.replace(config, architecture="Phi3ForCausalLM"), 2)
    with pytest.raises(TensorParallelError, match="3 KV heads"):
        with_shards(dataclasses.replace(config, num_key_value_heads=3), 2)
    with pytest.raises(TensorParallelError, match="whole projection"):
        with_shards(dataclasses.replace(config, qk_norm=True, qk_norm_scope="projection"), 2)
    with pytest.raises(TensorParallelError, match="fused projections"):
        source_shard("model.layers.0.self_attn.qkv_proj.weight", with_shards(config, 2))


def test_cli_generate_with_two_ranks_equals_the_llm(split_llms, tiny_model_dir, capsys) -> None:
    model_dir = tiny_model_dir("llama")
    argv = ["generate", "--model", str(model_dir), "--prompt", PROMPTS[1], "--max-tokens", "16"]
    assert cli_main([*argv, "--tensor-parallel-size", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    params = SamplingParams(temperature=0.0, max_tokens=16)
    expected = split_llms["llama"].generate([PROMPTS[1]], params)[0].outputs[0].token_ids
    assert result["token_ids"] == expected


def _prefill_logits(llm: LLM, ids: list[int]) -> np.ndarray:
    llm.runner.kv_cache.add_sequence(7)
    try:
        return llm.runner.prefill([7], [ids], logit_positions=range(len(ids)))
    finally:
        llm.runner.kv_cache.remove_sequence(7)


def test_two_ranks_equal_one_rank(split_llms, tiny_model_dir) -> None:
    single = LLM(tiny_model_dir("llama"), device="cpu", show_progress=False)
    split = split_llms["llama"]
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    one = [output.outputs[0].token_ids for output in single.generate(PROMPTS, params)]
    two = [output.outputs[0].token_ids for output in split.generate(PROMPTS, params)]
    assert one == two
    # Each rank caches its one of the two KV heads: half the bytes per token per device.
    assert 2 * split.runner.kv_bytes_per_token == single.runner.kv_bytes_per_token
    ids = single.tokenizer.encode(PROMPTS[2])
    assert np.abs(_prefill_logits(single, ids) - _prefill_logits(split, ids)).max() <= 1e-4


def test_cuda_ranks_without_tvms_nccl_binding_are_refused_by_name() -> None:
    from vllm_tvm.runtime.model.tensor_parallel_runner import NCCL_INIT, _start_session
    from vllm_tvm.runtime.tvm_runtime import load_runtime

    tvm = load_runtime()
    if tvm.get_global_func(NCCL_INIT, allow_missing=True) is not None:
        pytest.skip("this TVM has its NCCL binding")
    with pytest.raises(RuntimeError, match="NCCL binding"):
        _start_session(tvm, "cuda", 2)


def test_a_checkpoint_that_cannot_slice_is_refused_by_name(tiny_model_dir) -> None:
    model_dir = tiny_model_dir("llama")
    whole_tensors_only = type("WholeTensors", (), {"get": SafetensorsWeights(model_dir).get})()
    with pytest.raises(ValueError, match="WholeTensors cannot slice"):
        rank_reader(_checkpoint_plan(model_dir), whole_tensors_only, 0)


def test_a_remembered_single_rank_artifact_is_not_taken_for_two_ranks(
    split_llms, tiny_model_dir, capsys
) -> None:
    """The CLI's cached-start lookup keys its memo by the rank count too: after a
    single-rank `generate` of the model, a two-rank one still gets the split artifact."""
    model_dir = tiny_model_dir("llama")
    argv = ["generate", "--model", str(model_dir), "--prompt", PROMPTS[1], "--max-tokens", "4"]
    assert cli_main([*argv, "--json"]) == 0
    assert cli_main([*argv, "--tensor-parallel-size", "2", "--json"]) == 0
    outputs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    assert outputs[0]["token_ids"] == outputs[1]["token_ids"]
