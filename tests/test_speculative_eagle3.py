"""Speculative decoding with an EAGLE-3 head never changes what the engine outputs: greedy
tokens equal plain decoding (batched, preempted, with prefix-cache hits) with a random head
over a draft vocabulary half the target's (drafts mostly rejected) and with a head whose
drafts are all right only if its draft vocabulary is mapped and its own output fed back as
vLLM does (an echo head over a target that repeats its last token); the head's logits, of
the catch-up and of a fed draft, equal a torch run of the EAGLE-3 layer written here from
the checkpoint's tensors over transformers' hidden states of the target; sampled outputs
follow the plain distribution (chi-square); what cannot draft is refused by name."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from eagle_heads import make_eagle3_head, make_echo_eagle3_head, make_repeating_target
from engine_helpers import prompts_of_lengths, token_ids
from safetensors.torch import load_file, save_file
from speculative_scenarios import (
    echo_head_is_always_accepted,
    head_llms,
    head_sampling_follows_plain,
    random_head_changes_no_greedy_token,
)
from tiny_models import TinyModelSpec, make_tiny_model

from vllm_tvm.artifacts.speculative_roles import EAGLE3_HEAD, EAGLE3_HEAD_ARCHITECTURE
from vllm_tvm.checkpoints.eagle3_config import eagle3_aux_layers
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.speculative.config import SpeculativeConfig
from vllm_tvm.runtime.speculative.eagle3_head import (
    check_target_layers,
    draft_to_target,
    widen_logits,
)
from vllm_tvm.runtime.speculative.head_runner import HeadRunner, check_head_fits

TARGET_LAYERS = 7
"""Deep enough for vLLM's default aux layers (2, L // 2, L - 3) = (2, 3, 4)."""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """A 7-layer tiny Llama and its random heads (default layers, half the vocabulary; one
    with `norm_before_residual`), a repeating copy and its echo head (layers named
    unsorted, as a config may)."""
    root = tmp_path_factory.mktemp("eagle3")
    spec = TinyModelSpec("llama_7_layers", "LlamaConfig", {"num_hidden_layers": TARGET_LAYERS})
    target = make_tiny_model(spec, root / "target")
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    repeating = make_repeating_target(target, root / "repeating")
    return {
        "target": target,
        "random": make_eagle3_head(target, root / "random", draft_vocab=vocab // 2),
        "normed": make_eagle3_head(
            target, root / "normed", seed=5, draft_vocab=vocab // 2, norm_before_residual=True
        ),
        "repeating": repeating,
        "echo": make_echo_eagle3_head(
            repeating, root / "echo", eagle_aux_hidden_state_layer_ids=[6, 0, 3]
        ),
    }


@pytest.fixture
def make_eagle3_llm():
    with head_llms("eagle3") as make:
        yield make


def test_a_random_head_changes_no_greedy_token(make_eagle3_llm, checkpoints) -> None:
    plain, speculative = random_head_changes_no_greedy_token(
        make_eagle3_llm, checkpoints["target"], checkpoints["random"]
    )
    head = speculative.engine.speculator.draft.runner
    assert head.manifest.architecture == EAGLE3_HEAD_ARCHITECTURE
    assert speculative.runner.manifest.model_config["aux_hidden_layers"] == [2, 3, 4]  # vLLM's
    assert "aux_hidden_layers" not in plain.runner.manifest.model_config


@pytest.mark.parametrize("preempted", [False, True])
def test_an_echo_head_over_a_repeating_target_is_always_accepted(
    preempted: bool, make_eagle3_llm, checkpoints
) -> None:
    speculative = echo_head_is_always_accepted(
        make_eagle3_llm, checkpoints["repeating"], checkpoints["echo"], preempted
    )
    assert speculative.runner.manifest.model_config["aux_hidden_layers"] == [0, 3, 6]


def _reference_head_logits(
    target: Path, head: Path, tokens: list[int], draft: int
) -> tuple[np.ndarray, np.ndarray]:
    """A torch run of the EAGLE-3 head, written from vLLM's definition with transformers'
    Llama pieces and the checkpoint's tensors: at position p, g = fc(the inputs of the
    head's target layers at p), the layer attends over [input_layernorm(embed(token p + 1)),
    hidden_norm(g)] with g as residual (hidden_norm(g) under `norm_before_residual`), then
    the MLP; logits = lm_head(norm(output)), put at
    target token i + d2t[i] (-inf elsewhere). The logits after the last token, and after a
    draft fed with the head's pre-norm output there as its hidden state."""
    import transformers
    from transformers.models.llama import modeling_llama as llama

    model = transformers.AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    config = transformers.LlamaConfig.from_pretrained(head)
    config._attn_implementation = "eager"
    weights = load_file(head / "model.safetensors")
    size = config.hidden_size
    layer = llama.LlamaDecoderLayer(config, layer_idx=0).eval()
    for name in ("q_proj", "k_proj", "v_proj"):
        out = getattr(layer.self_attn, name).out_features
        setattr(layer.self_attn, name, torch.nn.Linear(2 * size, out, bias=False))
    own = {k.removeprefix("midlayer."): v for k, v in weights.items() if k.startswith("midlayer.")}
    hidden_norm = llama.LlamaRMSNorm(size, config.rms_norm_eps)
    hidden_norm.weight.data = own.pop("hidden_norm.weight")
    layer.load_state_dict(own)
    norm = llama.LlamaRMSNorm(size, config.rms_norm_eps)
    norm.weight.data = weights["norm.weight"]
    rotary = llama.LlamaRotaryEmbedding(config)
    layers = eagle3_aux_layers(config.to_dict(), model.config.num_hidden_layers)

    def run(embeddings: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        both = torch.cat([layer.input_layernorm(embeddings), hidden_norm(hidden)], -1)[None]
        count = len(hidden)
        position_embeddings = rotary(both, torch.arange(count)[None])
        mask = torch.full((count, count), float("-inf")).triu(1)[None, None]
        attn, _ = layer.self_attn(both, position_embeddings, mask)
        residual = hidden_norm(hidden) if getattr(config, "norm_before_residual", False) else hidden
        residual = residual + attn[0]
        return residual + layer.mlp(layer.post_attention_layernorm(residual))

    def logits(prenorm: torch.Tensor) -> np.ndarray:
        draft_logits = norm(prenorm) @ weights["lm_head.weight"].T
        wide = torch.full((model.config.vocab_size,), float("-inf"))
        wide[torch.arange(len(draft_logits)) + weights["d2t"]] = draft_logits
        return wide.numpy()

    ids = torch.tensor([tokens])
    with torch.no_grad():
        states = model(ids, output_hidden_states=True).hidden_states  # [i]: input of layer i
        aux = torch.cat([states[i][0, :-1] for i in layers], dim=-1)
        fused = aux @ weights["fc.weight"].T
        embeddings = model.model.embed_tokens(torch.tensor([*tokens[1:], draft]))
        caught_up = run(embeddings[:-1], fused)
        fed = run(embeddings, torch.cat([fused, caught_up[-1:]]))
        return logits(caught_up[-1]), logits(fed[-1])


@pytest.mark.parametrize("name", ["random", "normed"])
def test_head_logits_equal_a_torch_reference(
    name: str, make_eagle3_llm, checkpoints, monkeypatch
) -> None:
    calls: list[tuple[str, list, np.ndarray]] = []
    prefill_head, decode_head = HeadRunner.prefill_head, HeadRunner.decode_head

    def prefilled(self, seq_ids, chunks, hidden, positions, zeroed_rows=()):
        logits, out = prefill_head(self, seq_ids, chunks, hidden, positions, zeroed_rows)
        calls.append(("prefill", [list(c) for c in chunks], logits))
        return logits, out

    def decoded(self, seq_ids, tokens, hidden):
        logits, out = decode_head(self, seq_ids, tokens, hidden)
        calls.append(("decode", list(tokens), logits))
        return logits, out

    monkeypatch.setattr(HeadRunner, "prefill_head", prefilled)
    monkeypatch.setattr(HeadRunner, "decode_head", decoded)
    target, head = checkpoints["target"], checkpoints[name]
    speculative = make_eagle3_llm(target, head, k=2)
    prompt = prompts_of_lengths(speculative, [12])[0]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    first = token_ids(speculative.generate([prompt], params))[0][0]
    (kind, chunks, caught_up), (fed_kind, fed_tokens, fed) = calls[:2]
    assert (kind, fed_kind) == ("prefill", "decode")
    assert chunks == [[*prompt[1:], first]]  # token p + 1 at head position p
    draft = int(caught_up[0].argmax())
    assert fed_tokens == [draft]
    reference, reference_fed = _reference_head_logits(target, head, [*prompt, first], draft)
    for engine, expected in ((caught_up[0], reference), (fed[0], reference_fed)):
        outside = np.isneginf(expected)
        assert outside.sum() == len(expected) - len(expected) // 2  # half the vocabulary
        assert np.array_equal(np.isneginf(engine), outside)
        np.testing.assert_allclose(engine[~outside], expected[~outside], atol=1e-4, rtol=0)


@pytest.mark.parametrize("pair", [("target", "random"), ("repeating", "echo")])
def test_sampled_outputs_with_a_head_follow_plain_sampling(
    pair: tuple[str, str], make_eagle3_llm, checkpoints
) -> None:
    target, head = (checkpoints[name] for name in pair)
    head_sampling_follows_plain(make_eagle3_llm, target, head, pair[1] == "echo")


def test_a_head_that_cannot_draft_for_the_target_is_refused_by_name(
    make_eagle3_llm, checkpoints, tmp_path
) -> None:
    speculative = make_eagle3_llm(checkpoints["target"], checkpoints["random"])
    runner, head = speculative.runner, speculative.engine.speculator.draft.runner
    architecture, spec = head.manifest.architecture, head.spec
    assert spec.draft_head is not None and runner.spec.hidden_states is not None

    def layers(named: tuple[int, ...]) -> dict[str, Any]:
        return {"draft_head": replace(spec.draft_head, target_layers=named)}

    refused = [  # (what the head's manifest says, built as, the refusal)
        ({"hidden_size": 32}, architecture, "hidden size of 32, the target 64"),
        ({"vocab_size": 7}, architecture, "vocabulary of 7"),
        ({}, runner.manifest.architecture, "was not built as an EAGLE-3 head"),
        (layers((0, 3, 7)), architecture, r"\[0, 3, 7\] \(the head's eagle_aux_hidden_state"),
        (layers((1, 3, 5)), architecture, r"\[1, 3, 5\]; the target was built exporting"),
    ]
    for changes, built_as, message in refused:
        with pytest.raises(ValueError, match=message):
            check_head_fits(
                SpeculativeConfig("eagle3", 3, model="h"),
                built_as,
                replace(spec, **changes),
                runner,
            )
    final_only = replace(runner.spec, hidden_states=replace(runner.spec.hidden_states, layers=()))
    with pytest.raises(ValueError, match="exporting its final hidden states"):
        check_target_layers("eagle3", "h", spec, final_only)
    with pytest.raises(ValueError, match="built for an EAGLE-3 head"):
        check_target_layers("eagle", "h", spec, runner.spec)
    # a draft vocabulary smaller than the target's, and no d2t to map it
    no_d2t = shutil.copytree(checkpoints["random"], tmp_path / "no_d2t")
    tensors = load_file(no_d2t / "model.safetensors")
    del tensors["d2t"]
    save_file(tensors, no_d2t / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"draft vocabulary of \d+ tokens and no 'd2t'"):
        make_eagle3_llm(checkpoints["target"], no_d2t)


def test_aux_layers_default_to_vllms_and_are_refused_when_they_do_not_exist() -> None:
    assert eagle3_aux_layers({}, 32) == (2, 16, 29)
    given = {"eagle_aux_hidden_state_layer_ids": [29, 2, 16]}
    assert eagle3_aux_layers(given, 32) == (2, 16, 29)  # in layer order, as vLLM appends
    with pytest.raises(ValueError, match=r"\[2, 2, 1\] \(vLLM's default for 4 layers\)"):
        eagle3_aux_layers({}, 4)
    with pytest.raises(ValueError, match="not 3 distinct layers"):
        eagle3_aux_layers({"eagle_aux_hidden_state_layer_ids": [1, 2]}, 32)


def test_an_eagle3_checkpoint_builds_as_a_head_only(checkpoints) -> None:
    from vllm_tvm.checkpoints.model_config import read_model_config
    from vllm_tvm.compiler.speculative_variants import family_for_role
    from vllm_tvm.model_defs.config import ModelConfigError
    from vllm_tvm.model_defs.eagle3 import parse_eagle3_head_config

    head = read_model_config(checkpoints["random"])
    with pytest.raises(ValueError, match="LlamaForCausalLMEagle3 is an EAGLE-3 draft head"):
        family_for_role(head, None)
    with pytest.raises(ValueError, match="LlamaForCausalLM is not an EAGLE-3 head"):
        family_for_role(read_model_config(checkpoints["target"]), EAGLE3_HEAD)
    parsed = family_for_role(head, EAGLE3_HEAD).parse_config(head)
    assert parsed.draft_vocab_size == head["vocab_size"] // 2
    with pytest.raises(ModelConfigError, match="EAGLE-3 heads of 2 layers"):
        parse_eagle3_head_config({**head, "num_hidden_layers": 2})
    with pytest.raises(ModelConfigError, match="over a target of 128"):
        parse_eagle3_head_config({**head, "target_hidden_size": 128})


class _Tensors:
    """A weight source of a few named arrays."""

    def __init__(self, **arrays: np.ndarray) -> None:
        self.arrays = arrays

    def names(self) -> list[str]:
        return list(self.arrays)

    def get(self, name: str) -> np.ndarray:
        return self.arrays[name]


def test_d2t_maps_the_draft_vocabulary_or_is_refused_by_name() -> None:
    head = Path("head")
    targets = draft_to_target(_Tensors(d2t=np.array([1, 1, 3])), head, 3, 6)
    assert targets.tolist() == [1, 2, 5]
    wide = widen_logits(np.array([[0.5, 1.5, 2.5]], dtype=np.float32), targets, 6)
    assert wide.tolist() == [[-np.inf, 0.5, 1.5, -np.inf, -np.inf, 2.5]]
    assert draft_to_target(_Tensors(), head, 6, 6) is None  # the whole vocabulary, in order
    refused = [
        (_Tensors(), "draft vocabulary of 3 tokens and no 'd2t'"),
        (_Tensors(d2t=np.array([1, 1])), r"expected integers \[3\]"),
        (_Tensors(d2t=np.array([1, 1, 4])), "outside the target's 6 tokens"),
        (_Tensors(d2t=np.array([1, 0, 3])), "onto one token twice"),
    ]
    for weights, message in refused:
        with pytest.raises(ValueError, match=message):
            draft_to_target(weights, head, 3, 6)
