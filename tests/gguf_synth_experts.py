"""Test helper: a tiny transformers expert model written as llama.cpp's converter writes it.

Why apart from gguf_synth.py: expert models need what convert_hf_to_gguf.py does beyond
renaming: the experts of a layer stacked into one [experts, out, in] tensor per projection,
DeepSeek's `kv_b_proj` split into `attn_k_b` (per head, transposed) and `attn_v_b` (newer
files) or kept whole (older ones), the routing bias renamed to `exp_probs_b.bias`, and the
routing metadata keys. GGUF names still come from the `gguf` package's own name map, so they
are llama.cpp's, not ours.
"""

from __future__ import annotations

import re
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf_synth import SynthTensor, gguf_name, llama_cpp_permute, model_arch, model_metadata

_EXPERT = re.compile(r"(.+)\.experts\.(\d+)\.(\w+)\.weight")


def stack_experts(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-expert HF tensors merged into one [experts, out, in] tensor per projection, under
    the merged name the converter maps (`...experts.gate_proj.weight`); the rest as is."""
    merged: dict[str, np.ndarray] = {}
    stacks: dict[str, dict[int, np.ndarray]] = {}
    for name, values in state.items():
        match = _EXPERT.fullmatch(name)
        if match is None:
            merged[name] = values
            continue
        block, expert, projection = match.groups()
        stacks.setdefault(f"{block}.experts.{projection}.weight", {})[int(expert)] = values
    for name, experts in stacks.items():
        merged[name] = np.stack([experts[e] for e in range(len(experts))])
    return merged


def unstack_experts(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of `stack_experts`: each [experts, out, in] stack back as one HF tensor per
    expert (`...experts.E.gate_proj.weight`); the rest as is."""
    unstacked: dict[str, np.ndarray] = {}
    for name, values in state.items():
        block, found, projection = name.rpartition(".experts.")
        if not found:
            unstacked[name] = values
            continue
        for expert, rows in enumerate(values):
            unstacked[f"{block}.experts.{expert}.{projection}"] = rows
    return unstacked


def stored_tensors(state: dict[str, np.ndarray], config: Any) -> dict[str, np.ndarray]:
    """The HF tensors the converter writes, experts stacked: all but a tied `lm_head`."""
    stacked = stack_experts(state)
    if config.tie_word_embeddings:
        stacked.pop("lm_head.weight", None)
    return stacked


def _split_kv_b(name: str, values: np.ndarray, config: Any) -> dict[str, np.ndarray]:
    """convert_hf_to_gguf.py's split of `kv_b_proj` into k_b (transposed) and v_b."""
    heads, nope = config.num_attention_heads, config.qk_nope_head_dim
    per_head = values.reshape(heads, nope + config.v_head_dim, values.shape[-1])
    return {
        name.replace("kv_b_proj", "k_b_proj"): per_head[:, :nope].transpose(0, 2, 1).copy(),
        name.replace("kv_b_proj", "v_b_proj"): per_head[:, nope:].copy(),
    }


_ROUTERS = (".gate.weight", "shared_expert_gate.weight")
"""llama.cpp's converter keeps routers (`ffn_gate_inp`, `ffn_gate_inp_shexp`) in F32."""


def convert_experts(
    state: dict[str, np.ndarray],
    arch: str,
    config: Any,
    qtype: Q = Q.F32,
    split_kv_b: bool = True,
) -> tuple[list[SynthTensor], dict[str, np.ndarray]]:
    """GGUF tensors of an expert model, and the HF state dict they hold (the dequantized
    values: what a correct reader returns, and the oracle's weights).

    Matrices are stored in `qtype`; routers and 1-D tensors in F32, as the converter does.
    """
    arch_enum = model_arch(arch)
    tensors: list[SynthTensor] = []
    restored: dict[str, np.ndarray] = {}
    for name, values in stored_tensors(state, config).items():
        parts = {name: values}
        if split_kv_b and name.endswith("kv_b_proj.weight"):
            parts = _split_kv_b(name, values, config)
        for part_name, part in parts.items():
            stored_type = Q.F32 if part.ndim < 2 or part_name.endswith(_ROUTERS) else qtype
            stored = gguf.quants.quantize(part.astype(np.float32), stored_type)
            restored[part_name] = gguf.quants.dequantize(stored, stored_type).reshape(part.shape)
            if arch == "llama" and part_name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = config.num_attention_heads
                if "k_proj" in part_name:
                    heads = config.num_key_value_heads
                stored = llama_cpp_permute(stored, heads)
            mapped = part_name.replace("e_score_correction_bias", "e_score_correction.bias")
            layers = config.num_hidden_layers
            tensors.append(SynthTensor(gguf_name(mapped, arch_enum, layers), stored, stored_type))
    return tensors, _unmerged(restored)


def _unmerged(restored: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF tensors from merged ones: stacks per expert, k_b / v_b halves as one kv_b_proj."""
    state: dict[str, np.ndarray] = {}
    for name, values in restored.items():
        if name.endswith(".v_b_proj.weight"):
            continue
        if name.endswith(".k_b_proj.weight"):
            v_b = restored[name.replace("k_b_proj", "v_b_proj")]
            joined = np.concatenate([values.transpose(0, 2, 1), v_b], axis=1)
            state[name.replace("k_b_proj", "kv_b_proj")] = joined.reshape(-1, values.shape[1])
            continue
        state[name] = values
    return unstack_experts(state)


def moe_metadata(arch: str, config: Any) -> dict[str, Any]:
    """The metadata keys convert_hf_to_gguf.py writes for Mixtral / Qwen2-MoE / Qwen3-MoE."""
    metadata = {
        **model_metadata(arch, config),
        f"{arch}.expert_count": getattr(config, "num_local_experts", None) or config.num_experts,
        f"{arch}.expert_used_count": config.num_experts_per_tok,
    }
    if arch != "llama":
        metadata[f"{arch}.expert_feed_forward_length"] = config.moe_intermediate_size
    if arch == "qwen2moe":
        metadata[f"{arch}.expert_shared_feed_forward_length"] = (
            config.shared_expert_intermediate_size
        )
    return metadata


def deepseek2_metadata(config: Any, mla_keys: bool = True) -> dict[str, Any]:
    """The `deepseek2` keys of DeepseekV2Model.set_gguf_parameters for an HF DeepSeek config
    (V3: its router's sigmoid gating, as DeepSeek-V3's config.json states it)."""
    a = "deepseek2"
    rope = dict(config.rope_parameters or {})
    nope, rope_dim = config.qk_nope_head_dim, config.qk_rope_head_dim
    metadata: dict[str, Any] = {
        "general.name": "tiny",
        f"{a}.block_count": config.num_hidden_layers,
        f"{a}.context_length": config.max_position_embeddings,
        f"{a}.embedding_length": config.hidden_size,
        f"{a}.feed_forward_length": config.intermediate_size,
        f"{a}.attention.head_count": config.num_attention_heads,
        f"{a}.attention.head_count_kv": 1,
        f"{a}.rope.freq_base": float(rope["rope_theta"]),
        f"{a}.attention.layer_norm_rms_epsilon": float(config.rms_norm_eps),
        f"{a}.expert_count": config.n_routed_experts,
        f"{a}.expert_used_count": config.num_experts_per_tok,
        f"{a}.leading_dense_block_count": config.first_k_dense_replace,
        f"{a}.vocab_size": config.vocab_size,
        f"{a}.attention.kv_lora_rank": config.kv_lora_rank,
        f"{a}.expert_feed_forward_length": config.moe_intermediate_size,
        f"{a}.expert_shared_count": config.n_shared_experts,
        f"{a}.expert_weights_scale": float(config.routed_scaling_factor),
        f"{a}.rope.dimension_count": rope_dim,
        "tokenizer.ggml.bos_token_id": config.bos_token_id,
        "tokenizer.ggml.eos_token_id": config.eos_token_id,
    }
    if mla_keys:
        metadata[f"{a}.attention.key_length"] = config.kv_lora_rank + rope_dim
        metadata[f"{a}.attention.value_length"] = config.kv_lora_rank
        metadata[f"{a}.attention.key_length_mla"] = nope + rope_dim
        metadata[f"{a}.attention.value_length_mla"] = config.v_head_dim
    else:
        metadata[f"{a}.attention.key_length"] = nope + rope_dim
        metadata[f"{a}.attention.value_length"] = config.v_head_dim
    if config.q_lora_rank:
        metadata[f"{a}.attention.q_lora_rank"] = config.q_lora_rank
    if config.model_type == "deepseek_v3":
        metadata[f"{a}.expert_gating_func"] = int(gguf.ExpertGatingFuncType.SIGMOID)
        metadata[f"{a}.expert_group_count"] = config.n_group
        metadata[f"{a}.expert_group_used_count"] = config.topk_group
        if config.norm_topk_prob:
            metadata[f"{a}.expert_weights_norm"] = True
    if rope.get("rope_type") == "yarn":
        metadata[f"{a}.rope.scaling.type"] = "yarn"
        metadata[f"{a}.rope.scaling.factor"] = float(rope["factor"])
        metadata[f"{a}.rope.scaling.original_context_length"] = rope[
            "original_max_position_embeddings"
        ]
        for knob in ("beta_fast", "beta_slow"):
            if rope.get(knob) is not None:
                metadata[f"{a}.rope.scaling.yarn_{knob}"] = float(rope[knob])
        metadata[f"{a}.rope.scaling.yarn_log_multiplier"] = 0.1 * rope["mscale_all_dim"]
    return metadata
