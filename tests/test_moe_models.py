"""Mixture-of-experts models (model_defs/moe.py) and DeepSeek's latent attention
(model_defs/deepseek.py): a decode step reads only the chosen experts' weights, the
engine's batching rules stay exact on them, the MLA cache holds one latent + rope key per
token, and expert families the definitions lack are refused by name.

Greedy tokens and prefill logits against transformers run for every tiny model in
tests/test_generate_matches_transformers.py, batched == one at a time in
tests/test_engine_batching.py (both parametrized over TINY_MODELS).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import GREEDY, prompts_of_lengths, token_ids
from tiny_models import load_oracle

from vllm_tvm.checkpoints.families.refused import FAMILIES as REFUSED_FAMILIES
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.architectures import UnsupportedArchitectureError, family_for
from vllm_tvm.model_defs.config import ModelConfigError
from vllm_tvm.model_defs.moe import MoEForCausalLM
from vllm_tvm.model_defs.moe_config import parse_moe_config
from vllm_tvm.runtime.sampling.params import SamplingParams

SHARED_EXPERT_MODEL = "qwen2_moe_shared_dense_first"
"""Dense layer 0, then a routed layer with 8 experts (top 2) and a shared expert."""
MLA_MODEL = "deepseek_v3_mla_qlora_groups"
"""DeepSeek-V3 shape: q-LoRA, kv_lora_rank 32, rope dim 8, yarn, 4 groups of 2 experts."""


def _chosen_experts(model_dir, token_ids_: list[int]) -> list[int]:
    """The experts transformers' router picks for the last token in layer 1."""
    oracle = load_oracle(model_dir)
    picked: list[torch.Tensor] = []
    hook = oracle.model.layers[1].mlp.gate.register_forward_hook(
        lambda _module, _inputs, output: picked.append(output[2])
    )
    with torch.no_grad():
        oracle(torch.tensor([token_ids_]))
    hook.remove()
    return sorted(picked[0][-1].tolist())


def test_a_decode_step_reads_only_the_chosen_experts(tiny_model_dir, make_llm) -> None:
    """The unchosen experts' weights are NaN during the step; the logits do not change."""
    llm = make_llm(SHARED_EXPERT_MODEL)
    runner = llm.runner
    prompt = prompts_of_lengths(llm, [12])[0]
    next_token = 7
    chosen = _chosen_experts(tiny_model_dir(SHARED_EXPERT_MODEL), [*prompt, next_token])
    experts = runner.manifest.model_config["num_experts"]
    assert 0 < len(chosen) < experts

    def decode_after_prompt(seq_id: int, poison: bool) -> np.ndarray:
        runner.kv_cache.add_sequence(seq_id)
        try:
            runner.prefill([seq_id], [prompt])
            originals = list(runner.params)
            if poison:
                _poison_unchosen_experts(runner, chosen, experts)
            try:
                return runner.decode([seq_id], [next_token])
            finally:
                runner.params[:] = originals
        finally:
            runner.kv_cache.remove_sequence(seq_id)

    expected = decode_after_prompt(1, poison=False)
    poisoned = decode_after_prompt(2, poison=True)
    assert np.isfinite(poisoned).all()
    np.testing.assert_array_equal(poisoned, expected)


def _poison_unchosen_experts(runner, chosen: list[int], experts: int) -> None:
    """NaN in every row of layer 1's stacked expert weights that belongs to another expert."""
    for index, entry in enumerate(runner.manifest.params):
        if not entry.name.startswith("model.layers.1.") or ".experts." not in entry.name:
            continue
        weight = runner.params[index].numpy().copy()
        rows = weight.reshape(experts, -1, weight.shape[-1])
        for expert in range(experts):
            if expert not in chosen:
                rows[expert] = np.nan
        runner.params[index] = runner._tvm.runtime.tensor(weight, runner.device)


@pytest.mark.parametrize("name", ["qwen3_moe_sparse_step", MLA_MODEL])
def test_chunked_prefill_equals_whole_prefill(name: str, make_llm) -> None:
    whole = make_llm(name)
    chunked = make_llm(name, max_num_batched_tokens=8)
    prompts = prompts_of_lengths(whole, [45, 23, 60])
    expected = token_ids(whole.generate(prompts, GREEDY))
    assert token_ids(chunked.generate(prompts, GREEDY)) == expected


@pytest.mark.parametrize("name", [SHARED_EXPERT_MODEL, MLA_MODEL])
def test_prefix_cache_hit_and_preemption_equal_plain_runs(name: str, make_llm) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    roomy = make_llm(name, block_size=16)
    tight = make_llm(name, block_size=16, num_blocks=8)
    prompts = prompts_of_lengths(roomy, [20, 18, 22, 19])
    expected = token_ids(roomy.generate(prompts, params))
    assert token_ids(tight.generate(prompts, params)) == expected
    assert tight.engine.metrics.snapshot().num_preemptions > 0
    hit = roomy.generate(prompts[0], params)[0]
    assert hit.num_cached_tokens == 16
    assert hit.outputs[0].token_ids == expected[0]


@pytest.mark.parametrize("architecture", sorted(REFUSED_FAMILIES[0].refused))
def test_unsupported_expert_families_are_refused_by_name(architecture: str) -> None:
    message = f"unsupported architecture {architecture}"
    with pytest.raises(UnsupportedArchitectureError, match=message):
        family_for({"architectures": [architecture]})


def test_an_expert_model_for_a_gpu_target_is_refused_by_name() -> None:
    config = parse_moe_config(
        {
            "architectures": ["MixtralForCausalLM"],
            "vocab_size": 32,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
        }
    )
    target = resolve_target("rocm").make_target()
    with pytest.raises(ModelConfigError, match="MixtralForCausalLM compiles for CPU"):
        MoEForCausalLM(config, "float16", target)


def test_top_k_beyond_the_expert_count_is_refused() -> None:
    with pytest.raises(ModelConfigError, match="got 3 of 2"):
        parse_moe_config(
            {
                "architectures": ["Qwen3MoeForCausalLM"],
                "vocab_size": 32,
                "hidden_size": 16,
                "intermediate_size": 32,
                "moe_intermediate_size": 8,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_experts": 2,
                "num_experts_per_tok": 3,
            }
        )


def test_the_mla_cache_holds_one_latent_and_rope_key_per_token(make_llm) -> None:
    runner = make_llm(MLA_MODEL).runner
    config = runner.manifest.model_config
    assert (config["kv_lora_rank"], config["qk_rope_head_dim"]) == (32, 8)
    assert runner.kv_bytes_per_token == (32 + 8) * config["num_hidden_layers"] * 4


def test_one_token_chunks_of_a_prefill_call_equal_decode(make_llm) -> None:
    """A step whose every chunk is one token runs as `decode` (the MLA cache appends those
    before attention); the rows asked for come back in their order."""
    runner = make_llm(MLA_MODEL).runner
    prompts = [[5, 9, 14], [7, 3]]
    for seq_id, prompt in enumerate(prompts):
        runner.kv_cache.add_sequence(seq_id)
        runner.prefill([seq_id], [prompt])
    try:
        expected = runner.decode([0, 1], [21, 22])
        for seq_id in (0, 1):
            runner.kv_cache.popn(seq_id, 1)
        swapped = runner.prefill([0, 1], [[21], [22]], logit_positions=[1, 0])
    finally:
        for seq_id in (0, 1):
            runner.kv_cache.remove_sequence(seq_id)
    np.testing.assert_allclose(swapped, expected[::-1], rtol=0, atol=1e-6)


def test_latent_attention_steps_stay_below_the_merged_decode_of_32_sequences(
    make_llm, capsys
) -> None:
    """TVM's cache merges the decode of 32+ sequences sharing cached blocks into a pass that
    misses the appended token, so an MLA engine never schedules that many at once."""
    from vllm_tvm.compiler.runtime_spec import MLA_MAX_NUM_SEQS

    llm = make_llm(MLA_MODEL, max_num_seqs=64)
    assert llm.engine.scheduler.config.max_num_seqs == MLA_MAX_NUM_SEQS == 31
    assert "lowered to 31" in capsys.readouterr().err
    prompt = [(7 * i + 3) % 200 + 2 for i in range(40)]  # more than one cached block
    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    alone = llm.generate([prompt], params)[0].outputs[0].token_ids
    together = llm.generate([prompt] * 40, params)
    assert all(output.outputs[0].token_ids == alone for output in together)
