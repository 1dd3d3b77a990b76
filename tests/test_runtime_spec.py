"""The runtime spec: the compiler writes what the runtime needs to know of a model into the
manifest, the runtime reads only that (no HF config key), and a manifest of an older schema
is refused by name.

Oracles: the facts are derived here from the checkpoint's own config.json (the HF keys, by
their HF meaning), never from our parsed config; the run without a model config is checked
token for token against the run with it.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
import tvm
from engine_helpers import GREEDY, prompts_of_lengths, token_ids

from vllm_tvm.artifacts import manifest as manifest_module
from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import MANIFEST_NAME, ArtifactError, read_manifest
from vllm_tvm.artifacts.runtime_spec import (
    FULL_ATTENTION,
    GATED_DELTA_NET,
    LATENT_ATTENTION,
    RAGGED_LATENT,
    RAGGED_PREFILL,
    SLIDING_ATTENTION,
)
from vllm_tvm.compiler.build import make_request
from vllm_tvm.compiler.export import export_model
from vllm_tvm.compiler.recurrent_kernels import TargetRecurrentKernels
from vllm_tvm.compiler.runtime_spec import runtime_spec_for
from vllm_tvm.model_defs.architectures import DEFINITIONS
from vllm_tvm.runtime.engine.args import EngineArgs
from vllm_tvm.runtime.engine.builder import load_engine_parts
from vllm_tvm.runtime.weights.load_format import DUMMY

RUNTIME_ROOT = Path(__file__).resolve().parents[1] / "vllm_tvm" / "runtime"
FLOAT32_BYTES = 4


def _exported_spec(tiny_model_dir, name: str):
    """The runtime spec of the tiny model `name` (export only: nothing is compiled)."""
    return export_model(
        make_request(CompileOptions(tiny_model_dir(name), "llvm", "float32"))
    ).manifest.runtime


def _hf_config(tiny_model_dir, name: str) -> dict:
    return json.loads((tiny_model_dir(name) / "config.json").read_text())


def test_a_dense_models_spec_holds_a_key_and_a_value_per_kv_head_and_layer(tiny_model_dir):
    spec, hf = _exported_spec(tiny_model_dir, "llama"), _hf_config(tiny_model_dir, "llama")
    head_dim = hf["hidden_size"] // hf["num_attention_heads"]
    expected = 2 * hf["num_hidden_layers"] * hf["num_key_value_heads"] * head_dim * FLOAT32_BYTES
    assert spec.kv_bytes_per_token == expected
    assert [layers.kind for layers in spec.attention] == [FULL_ATTENTION]
    assert (spec.vocab_size, spec.hidden_size) == (hf["vocab_size"], hf["hidden_size"])
    assert spec.context_limit == hf["max_position_embeddings"]
    assert (spec.max_num_seqs, spec.prefix_caching, spec.ragged_dispatch) == (
        None,
        True,
        RAGGED_PREFILL,
    )
    assert spec.decode_single and spec.device_sampling and spec.recurrent_state == ()


def test_a_sliding_model_limits_its_chunks_to_the_window_and_shares_no_blocks(tiny_model_dir):
    spec = _exported_spec(tiny_model_dir, "gemma2_window_softcap")
    hf = _hf_config(tiny_model_dir, "gemma2_window_softcap")
    kinds = {layers.kind: layers for layers in spec.attention}
    assert set(kinds) == {FULL_ATTENTION, SLIDING_ATTENTION}
    assert kinds[SLIDING_ATTENTION].sliding_window == hf["sliding_window"]
    assert sum(layers.layers for layers in spec.attention) == hf["num_hidden_layers"]
    assert spec.prefill_chunk_limit == hf["sliding_window"]
    assert not spec.prefix_caching


def test_a_latent_attention_model_caches_one_latent_per_token_and_caps_its_batch(
    tiny_model_dir,
):
    spec = _exported_spec(tiny_model_dir, "deepseek_v2_mla_greedy")
    hf = _hf_config(tiny_model_dir, "deepseek_v2_mla_greedy")
    width = hf["kv_lora_rank"] + hf["qk_rope_head_dim"]
    assert [layers.kind for layers in spec.attention] == [LATENT_ATTENTION]
    assert spec.kv_bytes_per_token == hf["num_hidden_layers"] * width * FLOAT32_BYTES
    assert spec.max_num_seqs == 31 and "32+ sequences" in spec.max_num_seqs_reason
    assert spec.ragged_dispatch == RAGGED_LATENT


HYBRID_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
    "vocab_size": 96,
    "hidden_size": 48,
    "intermediate_size": 64,
    "num_hidden_layers": 6,
    "full_attention_interval": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "num_experts": 0,
}
"""A Qwen3-Next config: layers 2 and 5 full attention, the other four Gated DeltaNet."""


def test_a_hybrid_models_spec_holds_its_recurrent_state_per_linear_layer() -> None:
    """Per sequence and linear layer: K - 1 conv inputs of q, k and v, and one fp32
    [k_dim, v_dim] state per value head (whatever the model dtype); the KV cache holds the
    full layers only; blocks are not shared (they carry no recurrent state)."""
    hf = HYBRID_CONFIG
    family = DEFINITIONS["hybrid"]
    target = tvm.target.Target("llvm")
    config = family.parse_config(hf)
    model = family.build_model(config, "bfloat16", target, kernels=TargetRecurrentKernels(target))
    spec = runtime_spec_for(model, config, "bfloat16", ["prefill", "decode", "decode_single"])
    conv_channels = (
        2 * hf["linear_num_key_heads"] * hf["linear_key_head_dim"]
        + hf["linear_num_value_heads"] * hf["linear_value_head_dim"]
    )
    (state,) = spec.recurrent_state
    assert (state.kind, state.layers) == (GATED_DELTA_NET, 4)
    assert state.conv_state_bytes == (hf["linear_conv_kernel_dim"] - 1) * conv_channels * 4
    assert state.ssm_state_bytes == (
        hf["linear_num_value_heads"] * hf["linear_key_head_dim"] * hf["linear_value_head_dim"] * 4
    )
    (full,) = spec.attention
    assert (full.kind, full.layers) == (FULL_ATTENTION, 2)
    assert full.kv_bytes_per_token == 2 * 2 * hf["num_key_value_heads"] * hf["head_dim"] * 2
    assert spec.num_layers == hf["num_hidden_layers"] and not spec.prefix_caching


def test_a_manifest_of_an_older_schema_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(ArtifactError, match=r"schema_version 1 is not supported.*recompile"):
        read_manifest(tmp_path)


def test_the_runtime_reads_no_model_config() -> None:
    """No runtime module touches the manifest's `model_config` (the HF config keys): what
    it needs is in the runtime spec."""
    readers = [
        f"{path.relative_to(RUNTIME_ROOT)}:{node.lineno}"
        for path in sorted(RUNTIME_ROOT.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr == "model_config"
    ]
    assert not readers


def test_an_artifact_without_its_model_config_runs_the_same(make_llm, tmp_path: Path) -> None:
    current = make_llm()
    bare = shutil.copytree(current.runner.artifact_dir, tmp_path / "artifact")
    manifest = json.loads((bare / MANIFEST_NAME).read_text())
    manifest["model_config"] = {}
    (bare / MANIFEST_NAME).write_text(json.dumps(manifest))
    without = make_llm(artifact=bare)
    prompts = prompts_of_lengths(current, [12, 20])
    assert token_ids(without.generate(prompts, GREEDY)) == token_ids(
        current.generate(prompts, GREEDY)
    )


def test_an_engine_start_reads_and_hashes_the_artifact_once(make_llm, monkeypatch) -> None:
    llm = make_llm()
    artifact = llm.runner.artifact_dir
    hashed: list[str] = []
    real_hash = manifest_module.sha256_of_file

    def counting_hash(path: Path) -> str:
        hashed.append(path.name)
        return real_hash(path)

    monkeypatch.setattr(manifest_module, "sha256_of_file", counting_hash)
    args = EngineArgs(
        model=llm.model_path,
        artifact=artifact,
        load_format=DUMMY,
        show_progress=False,
        num_blocks=8,
    )
    hashed.clear()
    parts = load_engine_parts(args)
    assert sorted(hashed) == sorted(read_manifest(artifact, verify=False).files)
    assert parts.runner.manifest.runtime.vocab_size == parts.runner.vocab_size
