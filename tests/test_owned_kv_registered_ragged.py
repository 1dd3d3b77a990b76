"""The owned-page prefill whose own-chunk product is the packed function the runtime
registers (what `--attention flashinfer --owned-kv` builds), run end to end on the CPU.

FlashInfer's kernel needs a GPU (the H200 check is benchmarks/h200_owned_flashinfer_check.py);
here the registered function is a NumPy statement of the contract the model and the runtime
rely on: `(q, k, v, q_indptr, out, lse)`, each row causal over its own sequence's new rows,
lse in base 2 (what TVM's merge kernel reads). So this checks the wiring around the kernel:
the compiled functions' call and its argument order, the runtime's plan per forward, and the
merge of a second chunk with its cached tokens, against transformers.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tiny_models import TINY_MODELS, load_oracle, make_tiny_model

from vllm_tvm.artifacts.backends import ATTENTION_FLASHINFER
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.runtime_spec import OwnedPagesSpec
from vllm_tvm.compiler import export
from vllm_tvm.compiler.build import compile_model, make_request
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.kv import flashinfer_ragged
from vllm_tvm.runtime.sampling.params import SamplingParams

LAYERS = 2
PROMPTS = ["Once upon a time", "The quick brown fox jumps over", "Beautiful is better than ugly."]


class NumpyRaggedAttention:
    """The registered product's contract in NumPy, in place of FlashInfer's kernel."""

    def __init__(self, library: Any, tvm: Any, device: Any, spec: OwnedPagesSpec) -> None:
        self.scale = spec.head_dim**-0.5
        self.planned: np.ndarray | None = None
        self.calls = 0

    def plan(self, q_indptr: np.ndarray) -> None:
        self.planned = np.asarray(q_indptr).copy()

    def __call__(self, q: Any, k: Any, v: Any, q_indptr: Any, out: Any, lse: Any) -> None:
        indptr = q_indptr.numpy()
        assert self.planned is not None and np.array_equal(indptr, self.planned)
        self.calls += 1
        q_rows, k_rows, v_rows = (x.numpy().astype(np.float64) for x in (q, k, v))
        group = q_rows.shape[1] // k_rows.shape[1]
        k_rows, v_rows = (np.repeat(x, group, axis=1) for x in (k_rows, v_rows))
        outputs, lses = np.zeros_like(q_rows), np.zeros(q_rows.shape[:2])
        for start, end in itertools.pairwise(indptr):
            scores = np.einsum("qhd,khd->hqk", q_rows[start:end], k_rows[start:end]) * self.scale
            rows = end - start
            scores[:, np.triu(np.ones((rows, rows), bool), 1)] = -np.inf
            peak = scores.max(axis=-1, keepdims=True)
            weights = np.exp(scores - peak)
            total = weights.sum(axis=-1, keepdims=True)
            outputs[start:end] = np.einsum("hqk,khd->qhd", weights / total, v_rows[start:end])
            lses[start:end] = ((peak + np.log(total))[..., 0] / math.log(2)).T
        out.copyfrom(outputs.astype(out.dtype))
        lse.copyfrom(lses.astype(np.float32))


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny Llama and its CPU artifact built as `--attention flashinfer` builds the
    owned functions (the CPU target itself keeps attention `tir` for TVM's cache)."""
    root = tmp_path_factory.mktemp("registered_ragged")
    model = make_tiny_model(TINY_MODELS["llama"], root / "model")
    attach = export.attach_owned_kernels
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            export, "attach_owned_kernels", lambda *args: attach(*args[:4], ATTENTION_FLASHINFER)
        )
        options = CompileOptions(model=str(model), owned_kv=True)
        artifact = compile_model(make_request(options), root / "artifact", show_progress=False)
    return model, artifact


def test_prefills_through_the_registered_product_match_transformers(
    registered: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Greedy tokens of batched prompts equal transformers'; a prompt's second chunk (its
    own rows through the registered product, merged with its cached ones) within 1e-4;
    the product ran once a layer for each prefill, on the plan of that forward."""
    model, artifact = registered
    monkeypatch.setattr(flashinfer_ragged, "FlashInferRaggedAttention", NumpyRaggedAttention)
    llm = LLM(model, artifact=str(artifact), device="cpu", show_progress=False)
    stand_in = llm.runner._ragged
    assert isinstance(stand_in, NumpyRaggedAttention)
    oracle = load_oracle(model)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    for prompt, result in zip(PROMPTS, llm.generate(PROMPTS, params), strict=True):
        ids = llm.tokenizer.encode(prompt)
        with torch.no_grad():
            expected = oracle.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
        assert result.outputs[0].token_ids == expected[0, len(ids) :].tolist()
    assert stand_in.calls > 0 and stand_in.calls % LAYERS == 0
    runner, calls = llm.runner, stand_in.calls
    ids = llm.tokenizer.encode(PROMPTS[2]) * 2
    runner.kv_cache.add_sequence(9)
    try:
        runner.prefill_logits([9], [ids[:5]])
        logits = runner.prefill_logits([9], [ids[5:]]).numpy()
    finally:
        runner.kv_cache.remove_sequence(9)
    assert stand_in.calls == calls + 2 * LAYERS
    with torch.no_grad():
        expected_logits = oracle(torch.tensor([ids])).logits[0, -1].numpy()
    assert np.abs(logits[-1] - expected_logits).max() <= 1e-4
