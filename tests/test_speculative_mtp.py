"""Speculative decoding with a DeepSeek-V3 MTP layer never changes what the engine outputs:
greedy tokens equal plain decoding (batched, preempted, with prefix-cache hits; one draft
per step as vLLM's default, and two by re-running the layer) with a random layer, and with
an echo layer over a target that repeats its last token every draft is accepted; sampled
outputs follow the plain distribution (chi-square); the layer's logits equal transformers'
run of the same layer over the target's final-norm hidden states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from eagle_heads import add_mtp_layer, make_repeating_target
from engine_helpers import prompts_of_lengths, token_ids
from speculative_scenarios import (
    SAMPLES,
    assert_head_cache_empty,
    head_llms,
    sampling_follows_plain,
)
from test_speculative_engine import MIXED_LENGTHS, _homogeneity_p_value

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.speculative_roles import EAGLE_HEAD, MTP_ARCHITECTURE, MTP_HEAD
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.speculative.head_runner import HeadRunner

TARGET = "deepseek_v3_mla_qlora_groups"


@pytest.fixture(scope="module")
def checkpoints(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """The target with a random MTP layer; a repeating copy with an echo MTP layer."""
    root = tmp_path_factory.mktemp("mtp")
    repeating = make_repeating_target(tiny_model_dir(TARGET), root / "repeating")
    return {
        "random": add_mtp_layer(tiny_model_dir(TARGET), root / "random"),
        "echo": add_mtp_layer(repeating, root / "echo", echo=True),
    }


@pytest.fixture
def make_mtp_llm():
    with head_llms("mtp") as make:

        def make_mtp(model: Path, k: int | None = 1, **kwargs) -> LLM:
            if k is not None:
                kwargs["speculative_config"] = {"method": "mtp", "num_speculative_tokens": k}
            return make(model, None, **kwargs)

        yield make_mtp


@pytest.mark.parametrize("k", [1, 2])
def test_a_random_mtp_layer_changes_no_greedy_token(k: int, make_mtp_llm, checkpoints) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    plain = make_mtp_llm(checkpoints["random"], None, block_size=16)
    prompts = prompts_of_lengths(plain, MIXED_LENGTHS)
    expected = token_ids(plain.generate(prompts, params))
    speculative = make_mtp_llm(checkpoints["random"], k, block_size=16)
    assert speculative.engine.speculator.draft.runner.manifest.architecture == MTP_ARCHITECTURE
    assert token_ids(speculative.generate(prompts, params)) == expected
    stats = speculative.engine.metrics.snapshot()
    assert stats.spec_decode_num_drafts > 0
    assert len(stats.spec_decode_num_accepted_tokens_per_pos) == k
    again = speculative.generate(prompts, params)
    assert token_ids(again) == expected and sum(o.num_cached_tokens for o in again) > 0
    assert_head_cache_empty(speculative)


@pytest.mark.parametrize("preempted", [False, True])
def test_an_echo_mtp_layer_over_a_repeating_target_is_always_accepted(
    preempted: bool, make_mtp_llm, checkpoints
) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    sizes = {"block_size": 16, "num_blocks": 8} if preempted else {}
    plain = make_mtp_llm(checkpoints["echo"], None)
    prompts = prompts_of_lengths(plain, [20, 18, 22, 19] if preempted else MIXED_LENGTHS)
    expected = token_ids(plain.generate(prompts, params))
    assert all(len(set(tokens)) == 1 for tokens in expected)  # the target repeats
    speculative = make_mtp_llm(checkpoints["echo"], 2, **sizes)
    assert token_ids(speculative.generate(prompts, params)) == expected
    stats = speculative.engine.metrics.snapshot()
    assert stats.num_preemptions > 0 if preempted else stats.num_preemptions == 0
    assert 0 < stats.spec_decode_num_accepted_tokens == stats.spec_decode_num_draft_tokens
    assert stats.mean_acceptance_length > 2.5
    assert_head_cache_empty(speculative)


def test_sampled_outputs_with_an_mtp_layer_follow_plain_sampling(make_mtp_llm, checkpoints) -> None:
    plain = make_mtp_llm(checkpoints["random"], None, seed=1)
    runs = sampling_follows_plain(plain, make_mtp_llm(checkpoints["random"], 2, seed=2))
    # the test has the power to tell apart another distribution
    assert _homogeneity_p_value(runs[0], [runs[0][0]] * SAMPLES) < 1e-4


def _reference_layer_logits(checkpoint: Path, tokens: list[int]) -> np.ndarray:
    """transformers' run of the MTP layer over the target's final-norm hidden states: at each
    position p, eh_proj(concat(enorm(embed(token p + 1)), hnorm(hidden p))) (position 0's
    embedding zeroed) through decoder layer N, then shared_head."""
    import transformers
    from safetensors.torch import load_file

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    layers = model.config.num_hidden_layers
    grown = transformers.AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=torch.float32, num_hidden_layers=layers + 1
    ).eval()
    weights = load_file(checkpoint / "model.safetensors")
    prefix = f"model.layers.{layers}."
    eps = model.config.rms_norm_eps

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return x * scale * weights[prefix + name + ".weight"]

    ids = torch.tensor([tokens])
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states[-1][:, :-1]
        embeddings = model.model.embed_tokens(ids[:, 1:])
        embeddings[:, 0] = 0
        fused = torch.cat([norm(embeddings, "enorm"), norm(hidden, "hnorm")], dim=-1)
        x = fused @ weights[prefix + "eh_proj.weight"].T
        length = x.shape[1]
        positions = torch.arange(length)[None]
        mask = torch.full((1, 1, length, length), float("-inf")).triu(1)
        out = grown.model.layers[layers](
            x,
            attention_mask=mask,
            position_ids=positions,
            position_embeddings=grown.model.rotary_emb(x, positions),
        )
        out = out[0] if isinstance(out, tuple) else out
        logits = norm(out, "shared_head.norm") @ weights[prefix + "shared_head.head.weight"].T
        return logits[0].numpy()


def test_layer_logits_equal_transformers(make_mtp_llm, checkpoints, monkeypatch) -> None:
    catch_ups: list[tuple[list[list[int]], np.ndarray]] = []
    prefill_head = HeadRunner.prefill_head

    def recorded(self, seq_ids, chunks, hidden, positions, zeroed_rows=()):
        logits, out = prefill_head(self, seq_ids, chunks, hidden, positions, zeroed_rows)
        catch_ups.append(([list(c) for c in chunks], logits))
        return logits, out

    monkeypatch.setattr(HeadRunner, "prefill_head", recorded)
    speculative = make_mtp_llm(checkpoints["random"], 1)
    prompt = prompts_of_lengths(speculative, [12])[0]
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    first = token_ids(speculative.generate([prompt], params))[0][0]
    (chunks, logits), *_ = catch_ups
    assert chunks == [[*prompt[1:], first]]  # token p + 1 at the layer's position p
    reference = _reference_layer_logits(checkpoints["random"], [*prompt, first])
    np.testing.assert_allclose(logits[0], reference[-1], atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("name", "role", "message"),
    [
        (
            "llama",
            MTP_HEAD,
            "cannot be built as mtp_head: supported for deepseek, hybrid, hybrid-vl models",
        ),
        (TARGET, EAGLE_HEAD, "cannot be built as eagle_head: supported for llama models"),
    ],
)
def test_heads_of_another_family_are_refused_by_name(
    name: str, role: str, message: str, tiny_model_dir
) -> None:
    from vllm_tvm.compiler.build import cache_key_for, make_request

    with pytest.raises(ValueError, match=message):
        cache_key_for(make_request(CompileOptions(tiny_model_dir(name), speculative_role=role)))
