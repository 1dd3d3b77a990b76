"""Which GGUF architectures we serve, the GGUF -> HF tensor-name table, and where each HF
tensor lives in a file (`hf_tensor_index`: expert models hold several HF tensors in one GGUF
tensor, and one HF tensor in two; gguf_expert_tensors.py).

Why apart: deciding whether a file is supported (gguf_config.py) needs the table as much as
the weight reader (gguf_weights.py) does, and neither owns the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gguf import GGMLQuantizationType

from vllm_tvm.checkpoints.gguf_expert_tensors import (
    EXPERT_ARCHITECTURES,
    KV_B_JOINED,
    KV_B_PARTS,
    MIXTRAL_BLOCK_TENSORS,
    expert_block_tensors,
    expert_names,
    refuse_per_expert_tensor,
)
from vllm_tvm.checkpoints.gguf_file import GGUFFile, GGUFTensor
from vllm_tvm.checkpoints.gguf_reader import metadata_field

SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
}
SUPPORTED_ARCHITECTURES.update(EXPERT_ARCHITECTURES)

GEMMA_ARCHITECTURES = ("gemma", "gemma2", "gemma3")
"""llama.cpp's converter stores these architectures' RMSNorm weights as HF's w + 1 (the
factor the norm multiplies by); the HF names carry w (gguf_weights.py subtracts 1)."""

# The tensor that llama.cpp's converter writes for Llama 3.x "llama3" rope scaling: one
# divisor per rotary frequency. It is folded into ``rope_scaling`` and is not a model weight.
ROPE_FREQS_TENSOR = "rope_freqs.weight"

_GLOBAL_TENSORS: dict[str, str] = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

_BLOCK_TENSORS: dict[str, str] = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

_QKV_BIAS: dict[str, str] = {
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
}

# Per architecture, the per-block tensors it may hold (suffix after ``blk.N.``).
_ARCH_BLOCK_TENSORS: dict[str, dict[str, str]] = {
    "llama": {**_BLOCK_TENSORS, **_QKV_BIAS, "attn_output.bias": "self_attn.o_proj.bias"},
    "qwen2": {**_BLOCK_TENSORS, **_QKV_BIAS},
    "qwen3": {
        **_BLOCK_TENSORS,
        "attn_q_norm.weight": "self_attn.q_norm.weight",
        "attn_k_norm.weight": "self_attn.k_norm.weight",
    },
    "gemma": _BLOCK_TENSORS,
}
# Gemma 2/3 norm the attention and MLP outputs too; `ffn_norm` is then the MLP's input norm.
_ARCH_BLOCK_TENSORS["gemma2"] = {
    **_BLOCK_TENSORS,
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
_ARCH_BLOCK_TENSORS["gemma3"] = {
    **_ARCH_BLOCK_TENSORS["gemma2"],
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}

# Expert models: llama with experts (Mixtral), and the architectures made of experts.
_DENSE_FFN = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
_ARCH_BLOCK_TENSORS["llama"].update(MIXTRAL_BLOCK_TENSORS)
_ARCH_BLOCK_TENSORS.update(
    expert_block_tensors(
        {k: v for k, v in _BLOCK_TENSORS.items() if k not in _DENSE_FFN},
        {k: v for k, v in _BLOCK_TENSORS.items() if k in _DENSE_FFN},
        _QKV_BIAS,
    )
)

_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(.+)")


def architecture_of(reader: GGUFFile) -> str:
    """The file's ``general.architecture``, refused unless it is one we support."""
    arch = metadata_field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"unsupported GGUF architecture {arch!r}; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return arch


def hf_tensor_name(gguf_name: str, arch: str) -> str:
    """Map one GGUF tensor name of architecture ``arch`` to its HF transformers name.

    Raises ``ValueError`` naming the tensor when the architecture has no such tensor.
    """
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    match = _BLOCK_NAME.fullmatch(gguf_name)
    block_tensors = _ARCH_BLOCK_TENSORS[arch]
    if match is None or match.group(2) not in block_tensors:
        refuse_per_expert_tensor(gguf_name)
        allowed = [*_GLOBAL_TENSORS, *(f"blk.N.{s}" for s in block_tensors)]
        raise ValueError(
            f"unsupported GGUF tensor {gguf_name!r} for architecture {arch!r}; "
            f"supported: {', '.join(allowed)}"
        )
    return f"model.layers.{int(match.group(1))}.{block_tensors[match.group(2)]}"


@dataclass(frozen=True)
class TensorSlot:
    """Where one HF tensor lives in a GGUF file."""

    tensor: GGUFTensor
    expert: int | None = None
    """Its index along a stacked expert tensor's first (HF) axis; None: the whole tensor."""
    value_half: GGUFTensor | None = None
    """For a `kv_b_proj` that llama.cpp split: `attn_v_b` (and `tensor` is `attn_k_b`)."""

    @property
    def quant_type(self) -> GGMLQuantizationType:
        """The ggml type it is stored in; a joined `kv_b_proj` exists only dequantized: F32."""
        if self.value_half is not None:
            return GGMLQuantizationType.F32
        return GGMLQuantizationType(self.tensor.tensor_type)


def hf_tensor_index(reader: GGUFFile, arch: str) -> dict[str, TensorSlot]:
    """Every HF tensor of the file (weights only: `rope_freqs.weight` is left out) and where
    it lives: one slot per expert of a stacked projection, one `kv_b_proj` per split pair.

    Raises ``ValueError`` naming an unknown tensor or half of a `kv_b_proj` pair.
    """
    slots: dict[str, TensorSlot] = {}
    halves: dict[str, GGUFTensor] = {}
    for tensor in reader.tensors:
        if tensor.name == ROPE_FREQS_TENSOR:
            continue
        name = hf_tensor_name(tensor.name, arch)
        if name.endswith(KV_B_PARTS):
            halves[name] = tensor
            continue
        for hf_name, expert in expert_names(name, int(tensor.shape[-1])):
            slots[hf_name] = TensorSlot(tensor, expert)
    for name in sorted(halves):
        if not name.endswith(KV_B_PARTS[0]):
            continue
        prefix = name.removesuffix(KV_B_PARTS[0])
        value_half = halves.pop(prefix + KV_B_PARTS[1], None)
        if value_half is None:
            raise ValueError(f"GGUF tensor {halves[name].name!r} has no attn_v_b partner")
        slots[prefix + KV_B_JOINED] = TensorSlot(halves.pop(name), value_half=value_half)
    if halves:
        orphan = next(iter(halves.values())).name
        raise ValueError(f"GGUF tensor {orphan!r} has no attn_k_b partner")
    return slots
