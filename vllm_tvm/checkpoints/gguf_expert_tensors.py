"""llama.cpp's tensor names for expert models, and the HF tensors they hold.

Why apart from gguf_tensor_names.py: an expert model's file does not map one GGUF tensor to
one HF tensor. llama.cpp's converter stacks the experts of a layer into one 3-D tensor per
projection (`blk.N.ffn_gate_exps.weight`, numpy shape [experts, out, in]), which holds the
HF tensors `...experts.E.gate_proj.weight` of every expert E; and for DeepSeek's latent
attention it splits HF's `kv_b_proj` into `attn_k_b` (per head, transposed) and `attn_v_b`,
which must be joined back. This module names those relations; the weight reader slices a
stack per expert (a view of the file, never a copy of the stack) and joins `kv_b_proj`.

Sources of the names: the `gguf` package's MODEL_TENSORS / TENSOR_NAMES tables for
`qwen2moe`, `qwen3moe`, `llama` and `deepseek2`, and convert_hf_to_gguf.py's expert merging.
"""

from __future__ import annotations

import re

import numpy as np

EXPERT_PLACEHOLDER = "{expert}"
"""Stands for the expert index in the HF name of a stacked expert projection."""

KV_B_PARTS = ("self_attn.k_b_proj.weight", "self_attn.v_b_proj.weight")
"""The HF-side names of llama.cpp's `attn_k_b` / `attn_v_b` halves of `kv_b_proj`."""
KV_B_JOINED = "self_attn.kv_b_proj.weight"

ROW_VECTORS = ("mlp.shared_expert_gate.weight",)
"""HF [1, in] weights that older converters squeezed to 1-D (Qwen2-MoE's shared-expert gate)."""

_STACKS = {"ffn_gate_exps.weight": 0, "ffn_up_exps.weight": 1, "ffn_down_exps.weight": 2}
MIXTRAL_PROJECTIONS = ("w1", "w3", "w2")
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
"""HF names of one expert's (gate, up, down) projections: Mixtral's, everyone else's."""

# llama.cpp before its merged `_exps` tensors wrote one tensor per expert: blk.N.ffn_gate.E.
_PER_EXPERT_NAME = re.compile(r"blk\.\d+\.ffn_(gate|up|down)\.\d+\.weight")


def routed_tensors(block: str, projections: tuple[str, str, str]) -> dict[str, str]:
    """The router and the stacked experts of one layer's expert block."""
    return {
        "ffn_gate_inp.weight": f"{block}.gate.weight",
        **{
            stack: f"{block}.experts.{EXPERT_PLACEHOLDER}.{projections[index]}.weight"
            for stack, index in _STACKS.items()
        },
    }


def shared_expert_tensors(block: str) -> dict[str, str]:
    """An always-on expert's SwiGLU tensors (`_shexp`) under HF module `block`."""
    return {
        f"ffn_{part}_shexp.weight": f"{block}.{part}_proj.weight" for part in ("gate", "up", "down")
    }


MLA_TENSORS: dict[str, str] = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q_a.weight": "self_attn.q_a_proj.weight",
    "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight",
    "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
    "attn_kv_b.weight": KV_B_JOINED,
    "attn_k_b.weight": KV_B_PARTS[0],
    "attn_v_b.weight": KV_B_PARTS[1],
    "attn_output.weight": "self_attn.o_proj.weight",
}


def refuse_per_expert_tensor(gguf_name: str) -> None:
    """Refuse, by name, a tensor of llama.cpp's old one-tensor-per-expert layout."""
    if _PER_EXPERT_NAME.fullmatch(gguf_name):
        raise ValueError(
            f"unsupported GGUF tensor {gguf_name!r}: one tensor per expert is llama.cpp's old "
            "expert layout; supported: the merged blk.N.ffn_{gate,up,down}_exps tensors that "
            "convert_hf_to_gguf.py writes now (re-convert the model)"
        )


def expert_names(hf_name: str, experts: int) -> list[tuple[str, int | None]]:
    """(HF name, expert index) of every HF tensor a GGUF tensor holds: one per expert for a
    stacked projection (`experts` of them), else the tensor itself (index None)."""
    if EXPERT_PLACEHOLDER not in hf_name:
        return [(hf_name, None)]
    return [(hf_name.replace(EXPERT_PLACEHOLDER, str(e)), e) for e in range(experts)]


def join_kv_b(k_b: np.ndarray, v_b: np.ndarray) -> np.ndarray:
    """HF `kv_b_proj` [heads * (nope + v), latent] from llama.cpp's halves.

    `k_b` is [heads, latent, nope] (each head's key up-projection transposed) and `v_b`
    [heads, v, latent]; HF stacks per head the nope key rows, then the value rows.
    """
    latent = k_b.shape[1]
    joined = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1)
    return np.ascontiguousarray(joined.reshape(-1, latent))


def kv_b_part_shape(k_b_shape: tuple[int, ...], v_b_shape: tuple[int, ...]) -> tuple[int, int]:
    """The HF shape of the `kv_b_proj` that `join_kv_b` makes from halves of these shapes."""
    heads, latent, nope = k_b_shape
    return heads * (nope + v_b_shape[1]), latent
