"""Which GGUF architectures we serve, the GGUF -> HF tensor-name table, and where each HF
tensor lives in a file (`hf_tensor_index`: expert models hold several HF tensors in one GGUF
tensor, and one HF tensor in two; gguf_expert_tensors.py).

Why apart: deciding whether a file is supported (gguf_config.py) needs the table as much as
the weight reader (gguf_weights.py) does, and neither owns the other. Beside the names, the
table says what else llama.cpp's converter did to a family's tensors: which ones hold RoPE
configuration rather than weights, whose Q/K rows it permuted and which it transposed.
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
    "phi3": "Phi3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "granite": "GraniteForCausalLM",
    "gpt2": "GPT2LMHeadModel",
}
SUPPORTED_ARCHITECTURES.update(EXPERT_ARCHITECTURES)

UNWRITTEN_ARCHITECTURES: dict[str, str] = {
    "opt": "llama.cpp defines no OPT architecture, so no converter writes such a file; "
    "load OPT from its HF directory",
}
"""Architectures with a model definition here but no llama.cpp GGUF layout: refused with the
reason rather than read in an invented layout."""

PERMUTED_QK_ARCHITECTURES = ("llama", "granite")
"""llama.cpp's converter reorders these architectures' Q/K rows for its interleaved rotary
embedding (gguf_weights.py puts them back in HF order)."""

GEMMA_ARCHITECTURES = ("gemma", "gemma2", "gemma3")
"""llama.cpp's converter stores these architectures' RMSNorm weights as HF's w + 1 (the
factor the norm multiplies by); the HF names carry w (gguf_weights.py subtracts 1)."""

# The tensor that llama.cpp's converter writes for Llama 3.x "llama3" rope scaling: one
# divisor per rotary frequency. It is folded into ``rope_scaling`` and is not a model weight.
ROPE_FREQS_TENSOR = "rope_freqs.weight"
# Phi-3's longrope factors, one per rotary frequency; folded into ``rope_scaling`` too.
ROPE_FACTORS_LONG = "rope_factors_long.weight"
ROPE_FACTORS_SHORT = "rope_factors_short.weight"
_CONFIG_TENSORS: dict[str, tuple[str, ...]] = {
    "llama": (ROPE_FREQS_TENSOR,),
    "phi3": (ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT),
}

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

_ARCH_BLOCK_TENSORS["phi3"] = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_up.weight": "mlp.gate_up_proj.weight",  # gate and up rows, as HF fuses them
    "ffn_down.weight": "mlp.down_proj.weight",
}
# OLMo-2 norms each sublayer's output (no input norms) and whole q / k projections.
_ARCH_BLOCK_TENSORS["olmo2"] = {
    **{k: v for k, v in _BLOCK_TENSORS.items() if k not in ("attn_norm.weight", "ffn_norm.weight")},
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}
_ARCH_BLOCK_TENSORS["granite"] = _BLOCK_TENSORS

# GPT-2 keeps its own HF names (`transformer.` prefix), with a bias beside every weight.
_GPT2_MODULES = {
    "attn_norm": "ln_1",
    "attn_qkv": "attn.c_attn",
    "attn_output": "attn.c_proj",
    "ffn_norm": "ln_2",
    "ffn_up": "mlp.c_fc",
    "ffn_down": "mlp.c_proj",
}
_ARCH_BLOCK_TENSORS["gpt2"] = {
    f"{gguf}.{part}": f"{hf}.{part}"
    for gguf, hf in _GPT2_MODULES.items()
    for part in ("weight", "bias")
}
_ARCH_GLOBAL_TENSORS: dict[str, dict[str, str]] = {
    "gpt2": {
        "token_embd.weight": "transformer.wte.weight",
        "position_embd.weight": "transformer.wpe.weight",
        "output_norm.weight": "transformer.ln_f.weight",
        "output_norm.bias": "transformer.ln_f.bias",
        "output.weight": "lm_head.weight",
    },
}
_ARCH_BLOCK_PREFIX: dict[str, str] = {"gpt2": "transformer.h"}

_TRANSPOSED_TENSORS: dict[str, tuple[str, ...]] = {
    "gpt2": tuple(f"{gguf}.weight" for gguf in ("attn_qkv", "attn_output", "ffn_up", "ffn_down")),
}
"""Block tensors that llama.cpp's converter stores transposed against their HF layout
(GPT-2's `Conv1D` weights are [in, out] in HF, [out, in] in the file)."""


_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(.+)")


def architecture_of(reader: GGUFFile) -> str:
    """The file's ``general.architecture``, refused unless it is one we support."""
    arch = metadata_field(reader, "general.architecture")
    if arch in UNWRITTEN_ARCHITECTURES:
        raise ValueError(
            f"unsupported GGUF architecture {arch!r}: {UNWRITTEN_ARCHITECTURES[arch]}; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
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
    global_tensors = _ARCH_GLOBAL_TENSORS.get(arch, _GLOBAL_TENSORS)
    if gguf_name in global_tensors:
        return global_tensors[gguf_name]
    match = _BLOCK_NAME.fullmatch(gguf_name)
    block_tensors = _ARCH_BLOCK_TENSORS[arch]
    if match is None or match.group(2) not in block_tensors:
        refuse_per_expert_tensor(gguf_name)
        raise ValueError(
            f"unsupported GGUF tensor {gguf_name!r} for architecture {arch!r}; "
            f"supported: {', '.join(accepted_tensor_names(arch))}"
        )
    prefix = _ARCH_BLOCK_PREFIX.get(arch, "model.layers")
    return f"{prefix}.{int(match.group(1))}.{block_tensors[match.group(2)]}"


def accepted_tensor_names(arch: str) -> list[str]:
    """Every GGUF tensor name read for ``arch`` (``blk.N.`` standing for each block)."""
    global_tensors = _ARCH_GLOBAL_TENSORS.get(arch, _GLOBAL_TENSORS)
    return [
        *global_tensors,
        *_CONFIG_TENSORS.get(arch, ()),
        *(f"blk.N.{s}" for s in _ARCH_BLOCK_TENSORS[arch]),
    ]


def is_config_tensor(gguf_name: str, arch: str) -> bool:
    """Whether tensor ``gguf_name`` holds configuration (RoPE factors), not a model weight."""
    return gguf_name in _CONFIG_TENSORS.get(arch, ())


def is_transposed(gguf_name: str, arch: str) -> bool:
    """Whether the file stores tensor ``gguf_name`` transposed against its HF layout."""
    match = _BLOCK_NAME.fullmatch(gguf_name)
    return match is not None and match.group(2) in _TRANSPOSED_TENSORS.get(arch, ())


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
    """Every HF tensor of the file (weights only: RoPE factor tensors are left out) and where
    it lives: one slot per expert of a stacked projection, one `kv_b_proj` per split pair.

    Raises ``ValueError`` naming an unknown tensor or half of a `kv_b_proj` pair.
    """
    slots: dict[str, TensorSlot] = {}
    halves: dict[str, GGUFTensor] = {}
    for tensor in reader.tensors:
        if is_config_tensor(tensor.name, arch):
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
