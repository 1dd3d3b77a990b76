"""Llama and Mistral: the plain llama-shaped decoder, and llama.cpp's names for its tensors.

Why the shared GGUF names live here: llama.cpp names the tensors of every llama-shaped
family after Llama's, so the other family modules build their tables from these.
"""

from __future__ import annotations

from vllm_tvm.checkpoints.families import mixtral
from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture
from vllm_tvm.checkpoints.gguf_rope_scaling import ROPE_FREQS_TENSOR

BLOCK_TENSORS: dict[str, str] = {
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
"""Per-block tensors (suffix after `blk.N.`) of a llama-shaped decoder."""

DENSE_FFN = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
ATTENTION_TENSORS = {k: v for k, v in BLOCK_TENSORS.items() if k not in DENSE_FFN}
"""The norms and attention projections (what an expert model keeps of the dense block)."""

QKV_BIAS: dict[str, str] = {
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
}

QK_NORM: dict[str, str] = {
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}

GGUF_LLAMA = GGUFArchitecture(
    name="llama",
    hf_architecture="LlamaForCausalLM",
    block_tensors={
        **BLOCK_TENSORS,
        **QKV_BIAS,
        "attn_output.bias": "self_attn.o_proj.bias",
        **mixtral.GGUF_EXPERT_TENSORS,
    },
    config_tensors=(ROPE_FREQS_TENSOR,),
    permuted_qk=True,
    config_keys=mixtral.gguf_expert_keys,
)
"""A `llama` file is Mixtral when it has experts (families/mixtral.py)."""

FAMILIES = (
    FamilySpec(
        name="llama",
        architectures=("LlamaForCausalLM", "MistralForCausalLM"),
        tensor_parallel=True,
        gguf=(GGUF_LLAMA,),
    ),
)
