"""Expert models from GGUF (llama with experts = Mixtral, qwen2moe, qwen3moe, deepseek2)
against transformers on the same weights.

Each case is a tiny random transformers checkpoint (tests/tiny_models.py's expert configs,
reshaped only where llama.cpp's format cannot hold them: every layer of a qwen MoE file
routes, and DeepSeek's yarn keeps mscale == mscale_all_dim) written as llama.cpp's converter
writes it (gguf_synth_experts.py). Our engine on the GGUF file must give transformers' greedy
40 tokens x 3 prompts and prefill logits within 1e-4, transformers running on the weights the
file holds (the Q8_0 case: the dequantized ones). Where transformers reads such a GGUF file
itself (qwen2moe, qwen3moe), its reading is an independent check of the writer's layout.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf_synth import SynthTensor, load_with_transformers, write_gguf
from gguf_synth_experts import convert_experts, deepseek2_metadata, moe_metadata
from quantized_checkpoints import assert_equals_oracle
from safetensors.numpy import load_file, save_file
from tiny_models import TINY_MODELS, TinyModelSpec, load_oracle, make_tiny_model
from tokenizers import Tokenizer
from transformers import AutoConfig

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.checkpoints.gguf_config import hf_config_from_gguf
from vllm_tvm.checkpoints.gguf_weights import GGUFWeights
from vllm_tvm.compiler.build import make_request
from vllm_tvm.entrypoints.llm import LLM


@dataclass(frozen=True)
class Case:
    """A tiny expert model as a GGUF file: base tiny model, config changes, file layout."""

    tiny_model: str
    arch: str
    overrides: dict[str, Any]
    qtype: Q = Q.F32
    split_kv_b: bool = True
    """DeepSeek: llama.cpp's current attn_k_b / attn_v_b (True) or the older attn_kv_b."""


_V3_ROPE = TINY_MODELS["deepseek_v3_mla_qlora_groups"].overrides["rope_parameters"]
CASES = {
    "mixtral": Case("mixtral_top2", "llama", {}),
    "qwen2moe": Case("qwen2_moe_shared_dense_first", "qwen2moe", {"mlp_only_layers": []}),
    "qwen3moe_q8_0": Case("qwen3_moe_sparse_step", "qwen3moe", {"decoder_sparse_step": 1}, Q.Q8_0),
    "deepseek_v3": Case(
        "deepseek_v3_mla_qlora_groups",
        "deepseek2",
        {"rope_parameters": {**_V3_ROPE, "mscale": 1.0}},
    ),
    # Older files' whole attn_kv_b, in Q8_0: kept quantized it could not be sliced per head.
    # Rope width 16 makes kv_a_proj_with_mqa 48 rows, a multiple of the fused kernel's
    # 16-row blocks (docs/STATUS.md: the fused CPU matmul's ragged last block).
    "deepseek_v2_kv_b_q8_0": Case(
        "deepseek_v2_mla_greedy",
        "deepseek2",
        {"qk_rope_head_dim": 16},
        Q.Q8_0,
        split_kv_b=False,
    ),
}


@dataclass
class Written:
    """A case's HF checkpoint, its GGUF file and the weights the file holds."""

    model_dir: Path
    gguf_path: Path
    weights: dict[str, np.ndarray]


def _write(case: Case, folder: Path, name: str, squeeze_shared_gate: bool = False) -> Written:
    """Write `case` into `folder`; `squeeze_shared_gate`: Qwen2-MoE's [1, hidden] shared-expert
    gate stored 1-D, as converters before the current one did (and transformers expects)."""
    base = TINY_MODELS[case.tiny_model]
    spec = TinyModelSpec(name, base.config_class, {**base.overrides, **case.overrides})
    model_dir = make_tiny_model(spec, folder / "hf")
    config = AutoConfig.from_pretrained(model_dir)
    state = load_file(str(model_dir / "model.safetensors"))
    tensors, weights = convert_experts(state, case.arch, config, case.qtype, case.split_kv_b)
    if squeeze_shared_gate:
        for tensor in tensors:
            if tensor.name.endswith("ffn_gate_inp_shexp.weight"):
                tensor.data = tensor.data.reshape(-1)
    if case.arch == "deepseek2":
        metadata = deepseek2_metadata(config, mla_keys=case.split_kv_b)
    else:
        metadata = moe_metadata(case.arch, config)
    path = write_gguf(folder / "model.gguf", case.arch, metadata, tensors)
    return Written(model_dir, path, weights)


@pytest.fixture(scope="module", params=list(CASES))
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Written:
    return _write(CASES[request.param], tmp_path_factory.mktemp(request.param), request.param)


def test_every_tensor_equals_the_weights_the_file_holds(written: Written) -> None:
    weights = GGUFWeights(written.gguf_path)
    assert set(weights.names()) == set(written.weights)
    for name, expected in written.weights.items():
        assert weights.shape(name) == expected.shape, name
        np.testing.assert_array_equal(weights.get(name), expected, name)


def test_config_parses_to_the_checkpoint_config(written: Written) -> None:
    """Our GGUF config and the HF config.json give the same model description."""
    from vllm_tvm.checkpoints.model_config import read_model_config
    from vllm_tvm.model_defs.architectures import family_for

    ours = hf_config_from_gguf(written.gguf_path)
    hf = read_model_config(written.model_dir)
    assert ours["architectures"] == hf["architectures"]
    parse = family_for(hf).parse_config
    expected = parse(hf).to_dict()
    got = parse(ours).to_dict()
    assert got == expected


def _oracle(written: Written) -> Any:
    """transformers on the weights the file holds: the checkpoint with its safetensors
    replaced by them (transformers 5 fuses the experts of a checkpoint as it loads it)."""
    oracle_dir = written.model_dir.parent / "oracle"
    shutil.copytree(written.model_dir, oracle_dir, dirs_exist_ok=True)
    weights = {name: np.ascontiguousarray(values) for name, values in written.weights.items()}
    save_file(weights, str(oracle_dir / "model.safetensors"))
    return load_oracle(oracle_dir)


def test_engine_on_the_gguf_file_equals_transformers(written: Written) -> None:
    oracle = _oracle(written)
    tokenizer = Tokenizer.from_file(str(written.model_dir / "tokenizer.json"))
    llm = LLM(written.gguf_path, device="cpu", show_progress=False, skip_tokenizer_init=True)
    assert_equals_oracle(llm, oracle, encode=lambda text: tokenizer.encode(text).ids)


def test_a_quantized_kv_b_proj_is_dequantized_at_load(tmp_path: Path) -> None:
    """The absorbed attention slices `kv_b_proj` per head, so it never takes a block format;
    the other projections of the same Q8_0 file do."""
    written = _write(CASES["deepseek_v2_kv_b_q8_0"], tmp_path, "kv_b")
    formats = make_request(CompileOptions(written.gguf_path)).weight_formats
    assert formats["model.layers.1.self_attn.q_proj.weight"] == "q8_0"
    assert "model.layers.1.self_attn.kv_b_proj.weight" not in formats


# transformers' GGUF reader leaves moe_intermediate_size / shared_expert_intermediate_size at
# its config defaults, so the files it reads back use those sizes.
_TRANSFORMERS_SIZES = {
    "qwen2moe": {"moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632},
    "qwen3moe": {"moe_intermediate_size": 768},
}


@pytest.mark.parametrize("case_name", ["qwen2moe", "qwen3moe_q8_0"])
def test_transformers_reads_our_qwen_moe_files_as_we_do(case_name: str, tmp_path: Path) -> None:
    case = CASES[case_name]
    overrides = {**case.overrides, **_TRANSFORMERS_SIZES[case.arch]}
    resized = Case(case.tiny_model, case.arch, overrides, case.qtype)
    written = _write(resized, tmp_path, case_name, squeeze_shared_gate=True)
    hf_config, hf_state, hf_class = load_with_transformers(written.gguf_path)
    ours = GGUFWeights(written.gguf_path)
    assert ours.config["architectures"] == [hf_class]
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob"):
        assert ours.config[key] == getattr(hf_config, key), key
    experts = ours.config["num_experts"]
    for name, values in hf_state.items():
        if ".experts.gate_up_proj" in name or ".experts.down_proj" in name:
            prefix, fused = name.split(".experts.")
            parts = ("gate_proj", "up_proj") if fused == "gate_up_proj" else ("down_proj",)
            mine = np.stack(
                [
                    np.concatenate([ours.get(f"{prefix}.experts.{e}.{p}.weight") for p in parts])
                    for e in range(experts)
                ]
            )
        else:
            mine = ours.get(name).reshape(values.shape)
        np.testing.assert_array_equal(mine, values, name)


def test_old_per_expert_tensors_are_refused_by_name(tmp_path: Path) -> None:
    tensors = [
        SynthTensor("token_embd.weight", np.zeros((8, 32), np.float32), Q.F32),
        SynthTensor("blk.0.ffn_gate.3.weight", np.zeros((32, 32), np.float32), Q.F32),
    ]
    metadata = {"llama.expert_count": 4, "llama.expert_used_count": 2}
    path = write_gguf(tmp_path / "old.gguf", "llama", metadata, tensors)
    with pytest.raises(ValueError, match=r"'blk\.0\.ffn_gate\.3\.weight': one tensor per expert"):
        hf_config_from_gguf(path)


def test_a_kv_b_half_without_its_partner_is_refused(tmp_path: Path) -> None:
    tensors = [
        SynthTensor("token_embd.weight", np.zeros((8, 32), np.float32), Q.F32),
        SynthTensor("blk.0.attn_k_b.weight", np.zeros((2, 16, 8), np.float32), Q.F32),
    ]
    path = write_gguf(tmp_path / "half.gguf", "deepseek2", {}, tensors)
    with pytest.raises(ValueError, match=r"'blk\.0\.attn_k_b\.weight' has no attn_v_b partner"):
        hf_config_from_gguf(path)
