"""Hybrid models from GGUF (llama.cpp's `qwen35`, `qwen35moe`, `qwen3next`) against
transformers on the same weights.

Each case is a tiny random transformers hybrid (hybrid_checkpoints.py; fewer key than value
heads, so Qwen3.5's value heads are stored reordered) written as llama.cpp's converter
writes it (gguf_synth_hybrid.py). The reader must give back the weights the file holds
(the `gguf` package's dequantization of each stored tensor, in HF layout), and our engine on
the file transformers' greedy 40 tokens x 3 prompts and prefill logits within 1e-4, one
compile per case. Qwen3-Next files route every layer (llama.cpp's loader needs experts in
each); the Q8_0 case widens the model so that rows, and `out_proj`'s value-head column
segments, are whole Q8_0 blocks.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize
from gguf_synth import SynthTensor, write_gguf
from gguf_synth_hybrid import GGUF_ARCH, convert_hybrid, hybrid_metadata
from hybrid_checkpoints import SHAPE, hf_hybrid_model
from quantized_checkpoints import assert_equals_oracle
from safetensors.numpy import load_file, save_file

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.checkpoints.families.qwen3_next import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT
from vllm_tvm.checkpoints.gguf_config import hf_config_from_gguf
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights
from vllm_tvm.compiler.build import make_request
from vllm_tvm.entrypoints.llm import LLM


@dataclass(frozen=True)
class Case:
    architecture: str
    overrides: dict[str, Any] = field(default_factory=dict)
    qtype: Q = Q.F32
    legacy: bool = False
    """Qwen3-Next: the older files' whole `ssm_in` instead of `attn_qkv` + `attn_gate`."""


_ROUTE_EVERY_LAYER = {"mlp_only_layers": []}
CASES = {
    "qwen35": Case(QWEN3_5),
    "qwen35moe": Case(QWEN3_5_MOE),
    "qwen3next": Case(QWEN3_NEXT, _ROUTE_EVERY_LAYER),
    "qwen35_q8_0": Case(QWEN3_5, {"hidden_size": 64, "linear_value_head_dim": 32}, Q.Q8_0),
}
READER_ONLY = {"qwen3next_ssm_in": Case(QWEN3_NEXT, _ROUTE_EVERY_LAYER, legacy=True)}


@dataclass
class Written:
    model_dir: Path
    gguf_path: Path
    weights: dict[str, np.ndarray]


def _write(case: Case, folder: Path) -> Written:
    hf = hf_hybrid_model(case.architecture, **case.overrides)
    model_dir = folder / "hf"
    hf.save_pretrained(model_dir)
    state = load_file(str(model_dir / "model.safetensors"))
    tensors, weights = convert_hybrid(state, case.architecture, hf.config, case.qtype, case.legacy)
    metadata = hybrid_metadata(case.architecture, hf.config)
    path = write_gguf(folder / "model.gguf", GGUF_ARCH[case.architecture], metadata, tensors)
    return Written(model_dir, path, weights)


@pytest.fixture(scope="module", params=list(CASES))
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Written:
    return _write(CASES[request.param], tmp_path_factory.mktemp(request.param))


@pytest.mark.parametrize("case_name", [*CASES, *READER_ONLY])
def test_every_tensor_equals_the_weights_the_file_holds(case_name: str, tmp_path: Path) -> None:
    written = _write({**CASES, **READER_ONLY}[case_name], tmp_path)
    weights = GGUFWeights(written.gguf_path)
    assert set(weights.names()) == set(written.weights)
    for name, expected in written.weights.items():
        assert weights.shape(name) == expected.shape, name
        if name.endswith("A_log"):  # stored as -exp(A_log): equal within float32 rounding
            np.testing.assert_allclose(weights.get(name), expected, rtol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(weights.get(name), expected, name)


def test_config_parses_to_the_checkpoint_config(written: Written) -> None:
    from vllm_tvm.checkpoints.model_config import read_model_config
    from vllm_tvm.model_defs.architectures import family_for

    hf = read_model_config(written.model_dir)
    parse = family_for(hf).parse_config
    assert parse(hf_config_from_gguf(written.gguf_path)).to_dict() == parse(hf).to_dict()


def _oracle(written: Written) -> Any:
    """transformers on the weights the file holds (fp32, eager attention)."""
    from transformers import AutoModelForCausalLM

    oracle_dir = written.model_dir.parent / "oracle"
    shutil.copytree(written.model_dir, oracle_dir, dirs_exist_ok=True)
    weights = {name: np.ascontiguousarray(values) for name, values in written.weights.items()}
    save_file(weights, str(oracle_dir / "model.safetensors"))
    return AutoModelForCausalLM.from_pretrained(
        oracle_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()


def _encode(text: str) -> list[int]:
    """Prompt ids for a model without a tokenizer: one id per character."""
    return [ord(char) % SHAPE["vocab_size"] for char in text]


def test_engine_on_the_gguf_file_equals_transformers(written: Written) -> None:
    llm = LLM(written.gguf_path, device="cpu", show_progress=False, skip_tokenizer_init=True)
    assert_equals_oracle(llm, _oracle(written), encode=_encode)


def test_q8_0_delta_net_weights_stay_quantized(tmp_path: Path) -> None:
    """Rows joined or reordered and `out_proj`'s whole-block column segments keep their
    blocks: the compiled model reads them quantized, and the reordered blocks dequantize
    (by the `gguf` package) to the values the reader gives."""
    written = _write(CASES["qwen35_q8_0"], tmp_path)
    formats = make_request(CompileOptions(written.gguf_path)).weight_formats
    layer = "model.layers.0.linear_attn."
    for weight in ("in_proj_qkvz", "in_proj_ba", "out_proj"):
        assert formats[f"{layer}{weight}.weight"] == "q8_0", weight
    weights = GGUFWeights(written.gguf_path)
    for name in (f"{layer}in_proj_qkv.weight", f"{layer}out_proj.weight"):
        raw = weights.raw(name)
        assert raw.quant_type == Q.Q8_0
        np.testing.assert_array_equal(dequantize(raw.data, Q.Q8_0), weights.get(name), name)


def test_a_reordering_across_blocks_is_read_dequantized(tmp_path: Path) -> None:
    """`out_proj` with 8-wide value heads: its columns move inside Q8_0 blocks, so it exists
    only dequantized (and is compiled as a float weight) while the row-moved weights of
    the same file keep their blocks."""
    written = _write(Case(QWEN3_5, {"hidden_size": 64}, Q.Q8_0), tmp_path)
    weights = GGUFWeights(written.gguf_path)
    out_proj = "model.layers.0.linear_attn.out_proj.weight"
    assert weights.quant_type(out_proj) == Q.F32
    with pytest.raises(ValueError, match="rearranged across ggml blocks"):
        weights.raw(out_proj)
    formats = make_request(CompileOptions(written.gguf_path)).weight_formats
    assert out_proj not in formats
    assert formats["model.layers.0.linear_attn.in_proj_qkvz.weight"] == "q8_0"


def test_fused_gate_up_experts_are_refused_by_name(tmp_path: Path) -> None:
    tensors = [
        SynthTensor("token_embd.weight", np.zeros((8, 32), np.float32), Q.F32),
        SynthTensor("blk.0.ffn_gate_up_exps.weight", np.zeros((4, 64, 32), np.float32), Q.F32),
    ]
    path = write_gguf(tmp_path / "fused.gguf", "qwen35moe", {"qwen35moe.block_count": 1}, tensors)
    with pytest.raises(ValueError, match=r"'blk\.0\.ffn_gate_up_exps\.weight'"):
        GGUFWeights(path)


def test_mtp_blocks_after_the_decoder_are_left_unread(tmp_path: Path) -> None:
    """A Qwen3.5 file with its MTP layer (block 4 of 5, `nextn_predict_layers` 1, as the
    converter writes it by default) reads as the 4-layer decoder."""
    case = CASES["qwen35"]
    hf = hf_hybrid_model(case.architecture)
    state = {name: t.detach().numpy() for name, t in hf.state_dict().items()}
    tensors, held = convert_hybrid(state, case.architecture, hf.config)
    hidden = hf.config.hidden_size
    for suffix, shape in (
        ("attn_norm.weight", (hidden,)),
        ("attn_q.weight", (128, hidden)),
        ("nextn.eh_proj.weight", (hidden, 2 * hidden)),
        ("nextn.enorm.weight", (hidden,)),
    ):
        tensors.append(SynthTensor(f"blk.4.{suffix}", np.ones(shape, np.float32), Q.F32))
    metadata = {**hybrid_metadata(case.architecture, hf.config), "qwen35.block_count": 5}
    metadata["qwen35.nextn_predict_layers"] = 1
    path = write_gguf(tmp_path / "mtp.gguf", "qwen35", metadata, tensors)
    weights = GGUFWeights(path)
    assert weights.config["num_hidden_layers"] == 4
    assert set(weights.names()) == set(held)
