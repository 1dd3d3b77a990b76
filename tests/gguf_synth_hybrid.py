"""Test helper: a tiny transformers hybrid (Qwen3-Next, Qwen3.5, Qwen3.5-MoE) written as
llama.cpp's converter writes `qwen3next` / `qwen35` / `qwen35moe` files.

What the converter does beyond renaming (its Qwen3NextModel and the value-head reordering
of its Qwen3.5 classes), done here from that description: norms but the Gated DeltaNet
output norm stored + 1; `A_log` as -exp(A_log) (`ssm_a`); `dt_bias` as `ssm_dt.bias`; the
conv weight squeezed; Qwen3-Next's `in_proj_qkvz` split into `attn_qkv` / `attn_gate`
(or, `legacy`, kept whole as `ssm_in`); Qwen3.5's value heads, with fewer key heads,
reordered from grouped to tiled; experts stacked. GGUF names come from the `gguf`
package's own name map. Every GGUF tensor derived from an HF tensor is stored in the HF
tensor's type, so the weights the file holds are, in HF layout, that tensor quantized and
dequantized by the `gguf` package (the row moves commute with row-wise block quantization;
the column move of `out_proj` does when its head segments are whole blocks).
"""

from __future__ import annotations

from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf_synth import SynthTensor, model_arch
from gguf_synth_experts import stored_tensors, unstack_experts

from vllm_tvm.checkpoints.families.qwen3_next import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT

GGUF_ARCH = {QWEN3_NEXT: "qwen3next", QWEN3_5: "qwen35", QWEN3_5_MOE: "qwen35moe"}
_F32_SUFFIXES = (".gate.weight", "shared_expert_gate.weight", "conv1d.weight")
"""Routers and the conv weight stay F32, as the converter keeps them."""


def _tiled(values: np.ndarray, axis: int, config: Any, width: int) -> np.ndarray:
    """Value heads along `axis` (`width` entries each) from grouped to tiled order."""
    key_heads = config.linear_num_key_heads
    per_key = config.linear_num_value_heads // key_heads
    moved = np.moveaxis(values, axis, 0)
    rest = moved.shape[1:]
    heads = moved.reshape(key_heads, per_key, width, *rest).swapaxes(0, 1)
    return np.moveaxis(heads.reshape(moved.shape), 0, axis)


def _qwen35_reorder(name: str, values: np.ndarray, config: Any) -> np.ndarray:
    """The converter's grouped -> tiled reordering of one Qwen3.5 Gated DeltaNet tensor."""
    if config.linear_num_key_heads == config.linear_num_value_heads:
        return values
    v_dim = config.linear_value_head_dim
    qk = 2 * config.linear_num_key_heads * config.linear_key_head_dim
    if name.endswith(("in_proj_qkv.weight", "conv1d.weight")):
        return np.concatenate([values[:qk], _tiled(values[qk:], 0, config, v_dim)])
    if name.endswith("in_proj_z.weight"):
        return _tiled(values, 0, config, v_dim)
    if name.endswith(("in_proj_b.weight", "in_proj_a.weight", "A_log", "dt_bias")):
        return _tiled(values, 0, config, 1)
    if name.endswith("out_proj.weight"):
        return _tiled(values, 1, config, v_dim)
    return values


def _converted(name: str, values: np.ndarray, architecture: str, config: Any, legacy: bool):
    """(HF-side name for the gguf name map, stored float values) of each GGUF tensor that
    HF tensor `name` becomes."""
    if "linear_attn." in name and architecture != QWEN3_NEXT:
        values = _qwen35_reorder(name, values, config)
    if name.endswith("A_log"):
        return [(name, -np.exp(values))]
    if name.endswith("dt_bias"):
        return [(name.replace("dt_bias", "dt_proj.bias"), values)]
    if name.endswith("conv1d.weight"):
        return [(name, values.squeeze(1))]
    if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        return [(name, values + np.float32(1))]
    if name.endswith("in_proj_qkvz.weight") and not legacy:
        k_heads, k_dim = config.linear_num_key_heads, config.linear_key_head_dim
        group_v = config.linear_num_value_heads // k_heads * config.linear_value_head_dim
        grouped = values.reshape(k_heads, 2 * k_dim + 2 * group_v, -1)
        q, k, v, z = np.split(grouped, [k_dim, 2 * k_dim, 2 * k_dim + group_v], axis=1)
        qkv = np.concatenate([part.reshape(-1, values.shape[-1]) for part in (q, k, v)])
        return [
            (name.replace("in_proj_qkvz", "in_proj_qkv"), qkv),
            (name.replace("in_proj_qkvz", "in_proj_z"), z.reshape(-1, values.shape[-1])),
        ]
    return [(name, values)]


def _gguf_name(name: str, arch: gguf.MODEL_ARCH, layers: int) -> str:
    names = gguf.get_tensor_name_map(arch, layers)
    mapped = names.get_name(name)  # suffix-less tensors (A_log -> ssm_a)
    if mapped is not None:
        return mapped
    base, suffix = name.rsplit(".", 1)
    mapped = names.get_name(base)
    assert mapped is not None, name
    return f"{mapped}.{suffix}"


def convert_hybrid(
    state: dict[str, np.ndarray],
    architecture: str,
    config: Any,
    qtype: Q = Q.F32,
    legacy: bool = False,
) -> tuple[list[SynthTensor], dict[str, np.ndarray]]:
    """GGUF tensors of a hybrid model, and the HF tensors the file holds (what a correct
    reader returns; `A_log` as the original, within float32 rounding)."""
    arch_name = GGUF_ARCH[architecture]
    arch_enum = model_arch(arch_name)
    tensors: list[SynthTensor] = []
    held: dict[str, np.ndarray] = {}
    for name, values in stored_tensors(state, config).items():
        stored_type = Q.F32 if values.ndim < 2 or name.endswith(_F32_SUFFIXES) else qtype
        for gguf_side, part in _converted(name, values, architecture, config, legacy):
            stored = gguf.quants.quantize(np.ascontiguousarray(part, np.float32), stored_type)
            layers = config.num_hidden_layers
            tensors.append(
                SynthTensor(_gguf_name(gguf_side, arch_enum, layers), stored, stored_type)
            )
        if name.endswith("A_log") or stored_type == Q.F32:
            restored = values.astype(np.float32)
        else:
            quantized = gguf.quants.quantize(values.astype(np.float32), stored_type)
            restored = gguf.quants.dequantize(quantized, stored_type).reshape(values.shape)
        if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            restored = (restored + np.float32(1)) - np.float32(1)
        held[name] = restored
    return tensors, unstack_experts(held)


def hybrid_metadata(architecture: str, config: Any) -> dict[str, Any]:
    """The metadata keys the converter writes for a hybrid text config."""
    a = GGUF_ARCH[architecture]
    rope = config.rope_parameters
    interval = config.layer_types.index("full_attention") + 1
    metadata: dict[str, Any] = {
        "general.name": "tiny",
        f"{a}.block_count": config.num_hidden_layers,
        f"{a}.context_length": config.max_position_embeddings,
        f"{a}.embedding_length": config.hidden_size,
        f"{a}.feed_forward_length": config.intermediate_size,
        f"{a}.attention.head_count": config.num_attention_heads,
        f"{a}.attention.head_count_kv": config.num_key_value_heads,
        f"{a}.attention.key_length": config.head_dim,
        f"{a}.attention.value_length": config.head_dim,
        f"{a}.rope.freq_base": float(rope["rope_theta"]),
        f"{a}.rope.dimension_count": int(config.head_dim * rope["partial_rotary_factor"]),
        f"{a}.attention.layer_norm_rms_epsilon": float(config.rms_norm_eps),
        f"{a}.ssm.conv_kernel": config.linear_conv_kernel_dim,
        f"{a}.ssm.state_size": config.linear_key_head_dim,
        f"{a}.ssm.group_count": config.linear_num_key_heads,
        f"{a}.ssm.time_step_rank": config.linear_num_value_heads,
        f"{a}.ssm.inner_size": config.linear_value_head_dim * config.linear_num_value_heads,
        f"{a}.full_attention_interval": interval,
        f"{a}.vocab_size": config.vocab_size,
    }
    if architecture != QWEN3_5:
        metadata[f"{a}.expert_count"] = config.num_experts
        metadata[f"{a}.expert_used_count"] = config.num_experts_per_tok
        metadata[f"{a}.expert_feed_forward_length"] = config.moe_intermediate_size
        metadata[f"{a}.expert_shared_feed_forward_length"] = config.shared_expert_intermediate_size
    if architecture != QWEN3_NEXT:
        metadata[f"{a}.rope.dimension_sections"] = [*rope["mrope_section"], 0]
    return metadata
