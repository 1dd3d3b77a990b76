"""Whether a GGUF file's architecture is served, the GGUF -> HF name of each tensor, and
where each HF tensor lives in a file (`hf_tensor_index`: expert models hold several HF
tensors in one GGUF tensor, and one HF tensor in two; gguf_expert_tensors.py).

Why apart: deciding whether a file is supported (gguf_config.py) needs the names as much as
the weight reader (gguf_weights.py) does, and neither owns the other. The names themselves,
and what else llama.cpp's converter did to a family's tensors (which hold RoPE
configuration rather than weights, which it transposed), are each family's own
(checkpoints/families/); this module reads them by architecture name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gguf import GGMLQuantizationType

from vllm_tvm.checkpoints.family_index import gguf_architectures, gguf_refusal_of
from vllm_tvm.checkpoints.family_spec import GGUFArchitecture
from vllm_tvm.checkpoints.gguf_expert_tensors import (
    KV_B_JOINED,
    KV_B_PARTS,
    expert_names,
    refuse_per_expert_tensor,
)
from vllm_tvm.checkpoints.gguf_file import GGUFFile, GGUFTensor
from vllm_tvm.checkpoints.gguf_reader import metadata_field

_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(.+)")


def architecture_of(reader: GGUFFile) -> str:
    """The file's ``general.architecture``, refused unless it is one we support."""
    arch = metadata_field(reader, "general.architecture")
    supported = gguf_architectures()
    refusal = gguf_refusal_of(arch)
    if refusal is not None:
        raise ValueError(
            f"unsupported GGUF architecture {arch!r}: {refusal}; supported: {', '.join(supported)}"
        )
    if arch not in supported:
        raise ValueError(
            f"unsupported GGUF architecture {arch!r}; supported: {', '.join(supported)}"
        )
    return arch


def gguf_architecture(arch: str) -> GGUFArchitecture:
    """The family record of GGUF architecture ``arch`` (one ``architecture_of`` accepted)."""
    return gguf_architectures()[arch]


def hf_tensor_name(gguf_name: str, arch: str) -> str:
    """Map one GGUF tensor name of architecture ``arch`` to its HF transformers name.

    Raises ``ValueError`` naming the tensor when the architecture has no such tensor.
    """
    spec = gguf_architecture(arch)
    if gguf_name in spec.global_tensors:
        return spec.global_tensors[gguf_name]
    match = _BLOCK_NAME.fullmatch(gguf_name)
    block_tensors = spec.block_tensors
    if match is None or match.group(2) not in block_tensors:
        refuse_per_expert_tensor(gguf_name)
        raise ValueError(
            f"unsupported GGUF tensor {gguf_name!r} for architecture {arch!r}; "
            f"supported: {', '.join(accepted_tensor_names(arch))}"
        )
    return f"{spec.block_prefix}.{int(match.group(1))}.{block_tensors[match.group(2)]}"


def accepted_tensor_names(arch: str) -> list[str]:
    """Every GGUF tensor name read for ``arch`` (``blk.N.`` standing for each block)."""
    spec = gguf_architecture(arch)
    return [
        *spec.global_tensors,
        *spec.config_tensors,
        *(f"blk.N.{s}" for s in spec.block_tensors),
    ]


def is_unread_tensor(reader: GGUFFile, gguf_name: str, arch: str) -> bool:
    """Whether tensor ``gguf_name`` is no weight of the served model: configuration (RoPE
    factors), or a tensor of the MTP blocks stored after the decoder's."""
    spec = gguf_architecture(arch)
    if gguf_name in spec.config_tensors:
        return True
    match = _BLOCK_NAME.fullmatch(gguf_name)
    if spec.mtp_blocks_key is None or match is None:
        return False
    mtp_blocks = metadata_field(reader, f"{arch}.{spec.mtp_blocks_key}", 0)
    return int(match.group(1)) >= metadata_field(reader, f"{arch}.block_count") - mtp_blocks


def is_transposed(gguf_name: str, arch: str) -> bool:
    """Whether the file stores tensor ``gguf_name`` transposed against its HF layout."""
    match = _BLOCK_NAME.fullmatch(gguf_name)
    return match is not None and match.group(2) in gguf_architecture(arch).transposed_tensors


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
    """Every HF tensor of the file (weights only: RoPE factor and MTP tensors are left out)
    and where it lives: one slot per expert of a stacked projection, one `kv_b_proj` per
    split pair.

    Raises ``ValueError`` naming an unknown tensor or half of a `kv_b_proj` pair.
    """
    slots: dict[str, TensorSlot] = {}
    halves: dict[str, GGUFTensor] = {}
    for tensor in reader.tensors:
        if is_unread_tensor(reader, tensor.name, arch):
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
