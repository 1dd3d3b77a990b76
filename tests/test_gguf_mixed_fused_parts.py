"""Fused q/k/v and gate/up projections whose GGUF tensors have different types stay quantized.

llama.cpp's mixed presets store attn_v (and some FFN tensors) in another type than their
neighbours in the fused matrix. The tiny llama file here has layer 0's q/k in Q5_0 beside
v in Q8_0 and gate in Q4_1 beside up in Q8_0, layer 1's k in Q8_0 between q/v in Q5_0 (three
parts), all other matrices quantized too. The plan must keep every matrix quantized (in
parts: checkpoints/fused_parts.py), the manifest must hold no 2-D float parameter, and
the greedy tokens and logits must equal transformers reading the same file (through the
`gguf` package's dequantization) within the fused-dequantization tolerance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf_fused_dequant_helpers import PROMPT, greedy, write_quantized_llama

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.weight_formats import FLOAT, WIDENED
from vllm_tvm.compiler.build import compile_cached, make_request

STEPS = 8
LOGIT_TOLERANCE = 1e-4
"""As for single-type fused weights: the same fp32 values, summed in another order."""

LAYER0, LAYER1 = "model.layers.0.", "model.layers.1."
TYPES = {
    f"{LAYER0}self_attn.q_proj.weight": Q.Q5_0,
    f"{LAYER0}self_attn.k_proj.weight": Q.Q5_0,
    f"{LAYER0}self_attn.v_proj.weight": Q.Q8_0,
    f"{LAYER0}mlp.gate_proj.weight": Q.Q4_1,
    f"{LAYER0}mlp.up_proj.weight": Q.Q8_0,
    f"{LAYER1}self_attn.q_proj.weight": Q.Q5_0,
    f"{LAYER1}self_attn.k_proj.weight": Q.Q8_0,
    f"{LAYER1}self_attn.v_proj.weight": Q.Q5_0,
    f"{LAYER1}mlp.gate_proj.weight": Q.Q4_0,
    f"{LAYER1}mlp.up_proj.weight": Q.Q4_0,
    **{f"model.layers.{i}.self_attn.o_proj.weight": Q.Q4_0 for i in range(2)},
    **{f"model.layers.{i}.mlp.down_proj.weight": Q.Q5_0 for i in range(2)},
    "model.embed_tokens.weight": Q.Q8_0,
    "lm_head.weight": Q.Q8_0,
}
Q5_0_KEPT = WIDENED["Q5_0"]
"""CPU builds keep Q5_0 blocks in Q8_0's planes (the same values)."""
EXPECTED_FORMATS = {
    f"{LAYER0}self_attn.qkv_proj.weight.sources_0_2": Q5_0_KEPT,
    f"{LAYER0}self_attn.qkv_proj.weight.sources_2_3": "q8_0",
    f"{LAYER0}mlp.gate_up_proj.weight.sources_0_1": "q4_1",
    f"{LAYER0}mlp.gate_up_proj.weight.sources_1_2": "q8_0",
    f"{LAYER1}self_attn.qkv_proj.weight.sources_0_1": Q5_0_KEPT,
    f"{LAYER1}self_attn.qkv_proj.weight.sources_1_2": "q8_0",
    f"{LAYER1}self_attn.qkv_proj.weight.sources_2_3": Q5_0_KEPT,
    f"{LAYER1}mlp.gate_up_proj.weight": "q4_0",
    **{f"model.layers.{i}.self_attn.o_proj.weight": "q4_0" for i in range(2)},
    **{f"model.layers.{i}.mlp.down_proj.weight": Q5_0_KEPT for i in range(2)},
    "model.embed_tokens.weight": "q8_0",
    "lm_head.weight": "q8_0",
}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_quantized_llama(tmp_path_factory.mktemp("mixed") / "mixed.gguf", TYPES)


@pytest.fixture(scope="module")
def artifact(model: Path) -> Path:
    return compile_cached(make_request(CompileOptions(model)), show_progress=False)


def test_plan_keeps_mixed_fused_projections_quantized_in_parts(model: Path) -> None:
    assert dict(make_request(CompileOptions(model)).weight_formats) == EXPECTED_FORMATS


def test_gpu_plan_keeps_dequantizing_mixed_fused_projections(model: Path) -> None:
    """Parts are a CPU-artifact layout; a GPU artifact keeps the unsplit rule."""
    formats = make_request(CompileOptions(model, target="cuda", dtype="float32")).weight_formats
    assert not any(".sources_" in name for name in formats)
    assert f"{LAYER0}self_attn.qkv_proj.weight" not in formats
    assert formats[f"{LAYER1}mlp.gate_up_proj.weight"] == "q4_0"


def test_manifest_holds_no_matrix_as_float_and_parts_read_their_own_tensors(
    artifact: Path,
) -> None:
    manifest = read_manifest(artifact)
    assert {len(p.shape) for p in manifest.params if p.format == FLOAT} == {1}
    parts = {p.name: p for p in manifest.params if ".qkv_proj.weight.sources_" in p.name}
    first = parts[f"{LAYER0}self_attn.qkv_proj.weight.sources_0_2.qs"]
    assert first.sources == [f"{LAYER0}self_attn.{p}_proj.weight" for p in "qk"]
    assert (first.format, first.dtype, first.shape) == (Q5_0_KEPT, "int8", [(4 + 2) * 16, 64])
    value = parts[f"{LAYER0}self_attn.qkv_proj.weight.sources_2_3.qs"]
    assert value.sources == [f"{LAYER0}self_attn.v_proj.weight"]
    assert (value.format, value.dtype, value.shape) == ("q8_0", "int8", [2 * 16, 64])


def test_greedy_tokens_and_logits_equal_transformers_on_the_file(
    model: Path, artifact: Path
) -> None:
    from transformers import AutoModelForCausalLM

    ours = greedy(artifact, model, STEPS)
    oracle = AutoModelForCausalLM.from_pretrained(
        str(model.parent), gguf_file=model.name, dtype=torch.float32
    ).eval()
    ids = torch.tensor([PROMPT + ours.tokens[:-1]])
    with torch.no_grad():
        logits = oracle(ids).logits[0, len(PROMPT) - 1 :].numpy()
    assert np.abs(ours.logits - logits).max() <= LOGIT_TOLERANCE
    assert ours.tokens == [int(i) for i in np.argmax(logits, axis=1)]
