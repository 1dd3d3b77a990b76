"""`vllm-tvm embed DEST` without --model bundles the default model (SmolLM2-135M-Instruct,
GGUF Q4_1): its bin/vllm-tvm-cli, run with no Python on PATH, gives the Python engine's greedy
tokens and text (the engine equals transformers on this model: test_gguf_fused_dequant_smollm2),
and the C tokenizer cuts the test texts as the Python one does on its 49k vocabulary.
Skipped where the default model is not installed."""

from __future__ import annotations

import json
import subprocess

import pytest
from embed_abi import OK, TOKENIZER_TEXTS, detokenize, load_engine, load_library, tokenize

from vllm_tvm import LLM, SamplingParams
from vllm_tvm.checkpoints.default_model import DefaultModelMissingError, default_model_path
from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.runtime.tokenization.tokenizer import load_tokenizer

PROMPT = "The capital of France is"


def _installed() -> bool:
    try:
        default_model_path()
    except DefaultModelMissingError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _installed(), reason="the default model is not installed")


def test_default_model_bundle_gives_the_engines_greedy_tokens(tmp_path):
    bundle = tmp_path / "bundle"
    assert cli_main(["embed", str(bundle)]) == 0
    llm = LLM(default_model_path(), max_model_len=256, show_progress=False)
    reference = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=24))[0].outputs[0]
    command = [str(bundle / "bin" / "vllm-tvm-cli"), "--prompt", PROMPT, "--max-tokens", "24"]
    command += ["--temperature", "0", "--json"]
    done = subprocess.run(
        command, env={"PATH": str(tmp_path)}, capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    assert result["token_ids"] == list(reference.token_ids)
    assert result["text"] == reference.text

    # The tokenizer.json written from the GGUF vocabulary (GPT-2 regex after `\\p{N}` splits).
    lib = load_library(bundle)
    status, engine = load_engine(lib, bundle / "model")
    assert status == OK, lib.vllm_tvm_last_error()
    python_tokenizer = load_tokenizer(default_model_path())
    try:
        for text in TOKENIZER_TEXTS:
            ids = tokenize(lib, engine, text)
            assert ids == python_tokenizer.encode(text), text
            assert detokenize(lib, engine, ids) == python_tokenizer.decode(ids), text
    finally:
        lib.vllm_tvm_engine_free(engine)
