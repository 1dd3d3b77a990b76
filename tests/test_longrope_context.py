"""Which longrope factors run when (model_defs/rope_scaling.py), against transformers.

transformers rotates with the short factors while a sequence is at most
`original_max_position_embeddings` (128 in the tiny `phi3_longrope_partial`) long and with
the long factors past it. Compiled for the model's own context, the engine's context is that
original length: a sequence grows right up to it with transformers' short-factor tokens, and
a longer context is refused by name. Compiled for a longer `max_model_len` (vLLM's choice of
one set per engine) the long factors rotate every position of every sequence: a prompt past
the original length then equals transformers exactly (its forward, and its `generate`, whose
cache keys were rotated with the long factors by the prefill and which keeps them while the
sequence grows); a shorter one equals transformers only with its long factors forced.
The long-mode artifact is compiled once and the GGUF file of the same model reuses it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from gguf_families import write_family_gguf
from tiny_models import TINY_MODELS, load_oracle
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.model_config import read_model_config
from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.compiler.build import cache_key_for, make_request
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.entrypoints.resolve import resolve_artifact
from vllm_tvm.model_defs.architectures import family_for
from vllm_tvm.runtime.sampling.params import SamplingParams

NAME = "phi3_longrope_partial"
ORIGINAL = TINY_MODELS[NAME].overrides["original_max_position_embeddings"]
PROMPT_LENGTH = 100
LONG_CONTEXT = 2 * ORIGINAL
"""`max_model_len` of the long-factor engine (the checkpoint's full context is 512)."""
LONG_PROMPT_LENGTH = ORIGINAL + 22
NEW_TOKENS = 40


def _prompt(length: int, vocab: int) -> list[int]:
    return [(5 + 41 * i) % (vocab - 2) + 2 for i in range(length)]


def _eager_oracle(model_dir: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()


def _prefill_logits(llm: LLM, ids: list[int]) -> np.ndarray:
    runner = llm.runner
    runner.kv_cache.add_sequence(7)
    try:
        return runner.prefill([7], [ids], logit_positions=range(len(ids)))
    finally:
        runner.kv_cache.remove_sequence(7)


def _oracle_greedy(oracle, prompt: list[int], new_tokens: int) -> list[int]:
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = oracle.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False)
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module")
def long_llm(tiny_model_dir) -> LLM:
    return LLM(tiny_model_dir(NAME), device="cpu", show_progress=False, max_model_len=LONG_CONTEXT)


def test_generation_up_to_the_original_length_equals_transformers(tiny_model_dir) -> None:
    model_dir = tiny_model_dir(NAME)
    llm = LLM(model_dir, device="cpu", show_progress=False)
    assert llm.engine.max_model_len == ORIGINAL
    vocab = llm.runner.vocab_size
    prompt = [(5 + 41 * i) % (vocab - 2) + 2 for i in range(PROMPT_LENGTH)]
    params = SamplingParams(temperature=0.0, max_tokens=ORIGINAL, ignore_eos=True)
    output = llm.generate(prompt, params)[0].outputs[0]
    assert len(output.token_ids) == ORIGINAL - PROMPT_LENGTH
    assert output.finish_reason == "length"
    oracle = load_oracle(model_dir)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    with torch.no_grad():
        expected = oracle.generate(
            torch.tensor([prompt]), max_new_tokens=len(output.token_ids), do_sample=False
        )[0, PROMPT_LENGTH:]
    assert list(output.token_ids) == expected.tolist()


def test_a_context_past_the_original_length_is_refused_by_name(tiny_model_dir) -> None:
    short_factors = resolve_artifact(CompileOptions(tiny_model_dir(NAME)), show_progress=False)
    with pytest.raises(ValueError, match=rf"context limit {ORIGINAL} \(longrope: "):
        LLM(
            tiny_model_dir(NAME),
            device="cpu",
            show_progress=False,
            max_model_len=ORIGINAL + 1,
            artifact=short_factors,
        )


def test_the_factor_set_is_part_of_the_artifact_identity(tiny_model_dir) -> None:
    model_dir = tiny_model_dir(NAME)
    own, long = (
        cache_key_for(make_request(CompileOptions(model_dir, max_model_len=n))) for n in (None, 512)
    )
    assert own == cache_key_for(make_request(CompileOptions(model_dir, max_model_len=ORIGINAL)))
    assert long == cache_key_for(
        make_request(CompileOptions(model_dir, max_model_len=LONG_CONTEXT))
    )
    assert own != long
    llama = tiny_model_dir("llama")
    assert cache_key_for(make_request(CompileOptions(llama))) == cache_key_for(
        make_request(CompileOptions(llama, max_model_len=256))
    )


def test_compile_max_model_len_builds_the_long_factor_artifact(tiny_model_dir, capsys) -> None:
    model_dir = tiny_model_dir(NAME)
    assert cli_main(["compile", str(model_dir), "--max-model-len", "300"]) == 0
    artifact = Path(capsys.readouterr().out.strip().splitlines()[-1])
    resolved = resolve_artifact(CompileOptions(model_dir, max_model_len=LONG_CONTEXT), False)
    assert artifact == resolved
    rope = read_manifest(artifact).model_config["rope_scaling"]
    assert (rope["factor_set"], rope["factors"]) == ("long", [4.0, 5.0, 6.0, 7.0, 8.0, 9.0])


def test_long_mode_prefill_of_a_long_prompt_is_within_1e_4_of_transformers(
    long_llm: LLM, tiny_model_dir
) -> None:
    assert long_llm.engine.max_model_len == LONG_CONTEXT
    ids = _prompt(LONG_PROMPT_LENGTH, long_llm.runner.vocab_size)
    with torch.no_grad():
        expected = _eager_oracle(tiny_model_dir(NAME))(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(_prefill_logits(long_llm, ids) - expected).max() <= 1e-4


def test_long_mode_greedy_tokens_of_a_long_prompt_equal_transformers_generate(
    long_llm: LLM, tiny_model_dir
) -> None:
    prompt = _prompt(LONG_PROMPT_LENGTH, long_llm.runner.vocab_size)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    output = long_llm.generate(prompt, params)[0].outputs[0]
    expected = _oracle_greedy(_eager_oracle(tiny_model_dir(NAME)), prompt, NEW_TOKENS)
    assert list(output.token_ids) == expected


def test_long_mode_rotates_a_short_prompt_with_the_long_factors(
    long_llm: LLM, tiny_model_dir
) -> None:
    ids = _prompt(PROMPT_LENGTH, long_llm.runner.vocab_size)
    oracle = _eager_oracle(tiny_model_dir(NAME))
    with torch.no_grad():
        short_factors = oracle(torch.tensor([ids])).logits[0].numpy()
        rotary = oracle.model.rotary_emb
        long_inv_freq, _ = ROPE_INIT_FUNCTIONS["longrope"](oracle.config, "cpu", ORIGINAL + 1)
        rotary.original_inv_freq.copy_(long_inv_freq)
        long_factors = oracle(torch.tensor([ids])).logits[0].numpy()
    ours = _prefill_logits(long_llm, ids)
    assert np.abs(ours - long_factors).max() <= 1e-4
    assert np.abs(ours - short_factors).max() > 1e-2  # transformers' own answer differs


def test_gguf_phi3_long_mode_equals_transformers(
    long_llm: LLM, tiny_model_dir, tmp_path: Path
) -> None:
    model_dir = tiny_model_dir(NAME)
    path = tmp_path / "phi3.gguf"
    write_family_gguf(model_dir, path)
    hf, ours = read_model_config(model_dir), read_model_config(path)
    parsed = family_for(ours).parse_config(ours, LONG_CONTEXT)
    assert parsed == family_for(hf).parse_config(hf, LONG_CONTEXT)
    assert parsed.rope_scaling["factor_set"] == "long"
    llm = LLM(path, device="cpu", show_progress=False, max_model_len=LONG_CONTEXT)
    prompt = _prompt(LONG_PROMPT_LENGTH, llm.runner.vocab_size)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    output = llm.generate(prompt, params)[0].outputs[0]
    expected = _oracle_greedy(_eager_oracle(model_dir), prompt, NEW_TOKENS)
    assert list(output.token_ids) == expected


def test_publish_accepts_both_factor_sets_built_from_the_checkpoint(
    tiny_model_dir, long_llm
) -> None:
    """`publish --artifact` checks that the artifact was built from the checkpoint; a long-mode
    build of it is (its context picks the factor set, so the check parses with it)."""
    from vllm_tvm.cli.publish_cmd import check_artifact_fits

    model_dir = tiny_model_dir(NAME)
    for context in (None, LONG_CONTEXT):
        artifact = resolve_artifact(CompileOptions(model_dir, max_model_len=context), False)
        check_artifact_fits(artifact, model_dir, read_manifest(artifact).target)
