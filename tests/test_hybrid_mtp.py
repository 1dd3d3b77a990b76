"""Speculative decoding on the hybrids (Qwen3-Next, Qwen3.5, Qwen3.5-MoE) with their
checkpoints' MTP layer (`mtp.*`, written beside transformers' weights as vLLM reads them):
greedy tokens with MTP on equal transformers' (and so MTP off), batched over prompts of
mixed lengths, one draft a step and two (the layer re-run), and with preemption (a
preempted speculative sequence recomputes from a fresh state slot). Every rejected draft
rolls the recurrent state back to its snapshot (runtime/speculative/speculator.py); the
drafts and their acceptance are counted in the metrics. The layer's logits equal a run of
transformers' own decoder layer and norms over transformers' hidden states with the same
`mtp.*` tensors. One target build (with its hidden states) and one MTP build per
architecture."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from engine_helpers import assert_all_blocks_free
from hybrid_checkpoints import SHAPE, add_mtp_layer, hf_hybrid_model
from safetensors.torch import load_file
from speculative_scenarios import assert_head_cache_empty
from transformers_greedy import greedy_continuations

from vllm_tvm.artifacts.speculative_roles import HYBRID_MTP_ARCHITECTURE, MTP_HEAD
from vllm_tvm.checkpoints.families.qwen3_next import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT
from vllm_tvm.compiler.speculative_variants import family_for_role
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.speculative.head_runner import HeadRunner

NEW_TOKENS = 24
PROMPT_LENGTHS = (70, 9, 23)
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
ENGINE = {"device": "cpu", "show_progress": False, "skip_tokenizer_init": True}


@pytest.fixture(scope="module", params=[QWEN3_5, QWEN3_NEXT, QWEN3_5_MOE])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(checkpoint dir with an MTP layer, prompts, transformers' greedy continuations, the
    transformers model)."""
    hf = hf_hybrid_model(request.param)
    directory = tmp_path_factory.mktemp(f"{request.param}-mtp")
    hf.save_pretrained(directory)
    add_mtp_layer(directory, hf)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, SHAPE["vocab_size"], n).tolist() for n in PROMPT_LENGTHS]
    return directory, prompts, greedy_continuations(hf, prompts, NEW_TOKENS), hf


@pytest.fixture
def make_mtp_llm(checkpoint) -> Iterator[Any]:
    """Factory of LLMs drafting with the checkpoint's MTP layer; all blocks free after."""
    made: list[LLM] = []

    def make(k: int, **options: Any) -> LLM:
        spec = {"method": "mtp", "num_speculative_tokens": k}
        options = {**ENGINE, "max_model_len": 256, "speculative_config": spec, **options}
        made.append(LLM(checkpoint[0], **options))
        return made[-1]

    yield make
    for llm in made:
        assert_all_blocks_free(llm)
        assert_head_cache_empty(llm)


def _tokens(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    return [list(output.outputs[0].token_ids) for output in llm.generate(prompts, GREEDY)]


@pytest.mark.parametrize("k", [1, 2])
def test_mtp_drafts_change_no_greedy_token(k: int, checkpoint, make_mtp_llm) -> None:
    _, prompts, expected, _ = checkpoint
    llm = make_mtp_llm(k)
    assert llm.engine.speculator.draft.runner.manifest.architecture == HYBRID_MTP_ARCHITECTURE
    assert _tokens(llm, prompts) == expected
    stats = llm.engine.metrics.snapshot()
    assert stats.spec_decode_num_drafts > 0
    assert stats.spec_decode_num_draft_tokens >= stats.spec_decode_num_drafts
    assert len(stats.spec_decode_num_accepted_tokens_per_pos) == k
    assert sum(stats.spec_decode_num_accepted_tokens_per_pos) == (
        stats.spec_decode_num_accepted_tokens
    )


def test_preempted_mtp_sequences_recompute_to_the_same_tokens(checkpoint, make_mtp_llm) -> None:
    _, prompts, expected, _ = checkpoint
    llm = make_mtp_llm(1, num_blocks=7, block_size=16, max_model_len=112)
    assert _tokens(llm, prompts) == expected
    assert llm.engine.metrics.snapshot().num_preemptions > 0


def _reference_layer_logits(directory: Path, hf: torch.nn.Module, tokens: list[int]) -> np.ndarray:
    """The MTP layer over transformers' final-norm hidden states, from transformers' own
    modules: at each position p, fc(concat(norm_e(embed(token p + 1)), norm_h(hidden p)))
    through a decoder layer built as layer 0 with full attention (vLLM's layer index 0),
    then the zero-centred `mtp.norm` and the LM head (the embedding table when tied)."""
    weights = load_file(directory / "model.safetensors")
    config = copy.deepcopy(hf.config)
    config.layer_types = ["full_attention", *config.layer_types[1:]]
    layer = type(hf.model.layers[0])(config, 0).eval()
    prefix = "mtp.layers.0."
    state = {name.removeprefix(prefix): value for name, value in weights.items() if prefix in name}
    layer.load_state_dict(_fused_experts(state, dict(layer.named_parameters())))
    eps = config.rms_norm_eps

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return x * scale * (1 + weights[f"mtp.{name}.weight"])

    ids = torch.tensor([tokens])
    with torch.no_grad():
        hidden = hf(ids, output_hidden_states=True).hidden_states[-1][:, :-1]
        embeddings = hf.model.embed_tokens(ids[:, 1:])
        fused = torch.cat(
            [norm(embeddings, "pre_fc_norm_embedding"), norm(hidden, "pre_fc_norm_hidden")], -1
        )
        x = fused @ weights["mtp.fc.weight"].T
        length = x.shape[1]
        positions = torch.arange(length)[None]
        mask = torch.full((1, 1, length, length), float("-inf")).triu(1)
        out = layer(
            x,
            attention_mask=mask,
            position_ids=positions,
            position_embeddings=hf.model.rotary_emb(x, positions),
        )
        out = out[0] if isinstance(out, tuple) else out
        return (norm(out, "norm") @ hf.lm_head.weight.T)[0].numpy()


def _fused_experts(
    state: dict[str, torch.Tensor], params: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """`state` (as checkpoints store experts, one tensor each) in the layout of a module
    whose experts are stacked (`experts.gate_up_proj` [E, 2I, H], gate first; `down_proj`)."""
    name = "mlp.experts.gate_up_proj"
    if name not in params:
        return state
    experts = params[name].shape[0]
    part = "mlp.experts.{}.{}.weight"
    fused = {key: value for key, value in state.items() if ".experts." not in key}
    fused[name] = torch.stack(
        [
            torch.cat([state[part.format(e, "gate_proj")], state[part.format(e, "up_proj")]])
            for e in range(experts)
        ]
    )
    fused["mlp.experts.down_proj"] = torch.stack(
        [state[part.format(e, "down_proj")] for e in range(experts)]
    )
    return fused


def test_layer_logits_equal_transformers_modules(checkpoint, make_mtp_llm, monkeypatch) -> None:
    directory, prompts, _, hf = checkpoint
    catch_ups: list[tuple[list[list[int]], np.ndarray]] = []
    prefill_head = HeadRunner.prefill_head

    def recorded(self, seq_ids, chunks, hidden, positions, zeroed_rows=()):
        logits, out = prefill_head(self, seq_ids, chunks, hidden, positions, zeroed_rows)
        catch_ups.append(([list(c) for c in chunks], logits))
        return logits, out

    monkeypatch.setattr(HeadRunner, "prefill_head", recorded)
    llm = make_mtp_llm(1)
    prompt = prompts[2]
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    first = llm.generate([prompt], params)[0].outputs[0].token_ids[0]
    (chunks, logits), *_ = catch_ups
    assert chunks == [[*prompt[1:], first]]  # token p + 1 at the layer's position p
    reference = _reference_layer_logits(directory, hf, [*prompt, first])
    np.testing.assert_allclose(logits[0], reference[-1], atol=1e-4, rtol=0)


def test_a_checkpoint_with_several_mtp_layers_is_refused_by_name() -> None:
    config = {"architectures": [QWEN3_5], **SHAPE, "mtp_num_hidden_layers": 2}
    with pytest.raises(ValueError, match="mtp_num_hidden_layers=2: MTP drafting supports"):
        family_for_role(config, MTP_HEAD)
    assert family_for_role({**config, "mtp_num_hidden_layers": 1}, MTP_HEAD).name == "hybrid-mtp"
