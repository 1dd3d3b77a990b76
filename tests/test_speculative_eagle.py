"""Speculative decoding with an EAGLE head never changes what the engine outputs: greedy
tokens equal plain decoding (batched, preempted, with prefix-cache hits) with a random head
(drafts mostly rejected) and with a head whose drafts are all right (an echo head over a
target that repeats its last token: many drafts accepted at once); the head's logits equal
transformers' run of the same EAGLE-1 network over the target's final-norm hidden states;
sampled outputs follow the plain distribution (chi-square); a head that cannot draft for
its target is refused by name."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from eagle_heads import make_eagle_head, make_echo_head, make_repeating_target
from engine_helpers import prompts_of_lengths, token_ids
from safetensors.torch import load_file
from speculative_scenarios import (
    echo_head_is_always_accepted,
    head_llms,
    head_sampling_follows_plain,
    random_head_changes_no_greedy_token,
)

from vllm_tvm.artifacts.speculative_roles import HIDDEN_STATES_FUNCTION
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.speculative.config import SpeculativeConfig
from vllm_tvm.runtime.speculative.head_runner import HeadRunner, check_head_fits

TARGET = "llama"


@pytest.fixture(scope="module")
def heads(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """The target's random head, a repeating copy of the target and its echo head."""
    target = tiny_model_dir(TARGET)
    root = tmp_path_factory.mktemp("eagle")
    return {
        "random": make_eagle_head(target, root / "random"),
        "repeating": make_repeating_target(target, root / "repeating"),
        "echo": make_echo_head(target, root / "echo"),
    }


@pytest.fixture
def make_eagle_llm():
    with head_llms("eagle") as make:
        yield make


def test_a_random_head_changes_no_greedy_token(make_eagle_llm, tiny_model_dir, heads) -> None:
    target = tiny_model_dir(TARGET)
    plain, speculative = random_head_changes_no_greedy_token(
        make_eagle_llm, target, heads["random"]
    )
    assert HIDDEN_STATES_FUNCTION in speculative.runner.manifest.functions
    assert HIDDEN_STATES_FUNCTION not in plain.runner.manifest.functions


@pytest.mark.parametrize("preempted", [False, True])
def test_an_echo_head_over_a_repeating_target_is_always_accepted(
    preempted: bool, make_eagle_llm, heads
) -> None:
    echo_head_is_always_accepted(make_eagle_llm, heads["repeating"], heads["echo"], preempted)


def _reference_head_logits(target: Path, head: Path, tokens: list[int]) -> np.ndarray:
    """transformers' EAGLE-1 head over the target's final-norm hidden states: the logits at
    each position p of fc(concat(embed(token p + 1), hidden p)) through the head's layer."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    ids = torch.tensor([tokens])
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states[-1][0, :-1]
        config = transformers.AutoConfig.from_pretrained(head)
        body = transformers.LlamaModel(config).eval()
        weights = load_file(head / "model.safetensors")
        layer = {k.removeprefix("layers.0."): v for k, v in weights.items() if k.startswith("l")}
        body.layers[0].load_state_dict(layer, strict=False)
        body.layers[0].input_layernorm = torch.nn.Identity()
        body.norm = torch.nn.Identity()
        embeddings = model.model.embed_tokens(ids[:, 1:])[0]
        fused = torch.cat([embeddings, hidden], dim=-1) @ weights["fc.weight"].T
        out = body(inputs_embeds=fused[None]).last_hidden_state[0]
        return (out @ model.lm_head.weight.T).numpy()


def test_head_logits_equal_transformers(make_eagle_llm, tiny_model_dir, heads, monkeypatch) -> None:
    target = tiny_model_dir(TARGET)
    catch_ups: list[tuple[list[list[int]], np.ndarray]] = []
    prefill_head = HeadRunner.prefill_head

    def recorded(self, seq_ids, chunks, hidden, positions, zeroed_rows=()):
        logits, out = prefill_head(self, seq_ids, chunks, hidden, positions, zeroed_rows)
        catch_ups.append(([list(c) for c in chunks], logits))
        return logits, out

    monkeypatch.setattr(HeadRunner, "prefill_head", recorded)
    speculative = make_eagle_llm(target, heads["random"], k=1)
    prompt = prompts_of_lengths(speculative, [12])[0]
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    first = token_ids(speculative.generate([prompt], params))[0][0]
    (chunks, logits), *_ = catch_ups
    assert chunks == [[*prompt[1:], first]]  # token p + 1 at head position p
    reference = _reference_head_logits(target, heads["random"], [*prompt, first])
    np.testing.assert_allclose(logits[0], reference[-1], atol=1e-4, rtol=0)


@pytest.mark.parametrize("pair", [("target", "random"), ("repeating", "echo")])
def test_sampled_outputs_with_a_head_follow_plain_sampling(
    pair: tuple[str, str], make_eagle_llm, tiny_model_dir, heads
) -> None:
    target = tiny_model_dir(TARGET) if pair[0] == "target" else heads[pair[0]]
    head_sampling_follows_plain(make_eagle_llm, target, heads[pair[1]], pair[1] == "echo")


def test_a_head_that_cannot_draft_for_the_target_is_refused_by_name(
    make_eagle_llm, tiny_model_dir, heads
) -> None:
    target = tiny_model_dir(TARGET)
    speculative = make_eagle_llm(target, heads["random"])
    runner, head = speculative.runner, speculative.engine.speculator.draft.runner
    architecture, config = head.manifest.architecture, head.spec
    eagle = SpeculativeConfig("eagle", 3, model="h")
    with pytest.raises(ValueError, match="hidden size of 32, the target 64"):
        check_head_fits(eagle, architecture, replace(config, hidden_size=32), runner)
    with pytest.raises(ValueError, match="vocabulary of 7"):
        check_head_fits(eagle, architecture, replace(config, vocab_size=7), runner)
    with pytest.raises(ValueError, match="was not built as an EAGLE head"):
        check_head_fits(eagle, runner.manifest.architecture, config, runner)
    with pytest.raises(ValueError, match="was not built as an MTP layer"):
        check_head_fits(SpeculativeConfig("mtp", 1, model="h"), architecture, config, runner)
    plain = make_eagle_llm(target, None)
    with pytest.raises(ValueError, match="EAGLE heads need the target built with its hidden"):
        check_head_fits(eagle, architecture, config, plain.runner)
