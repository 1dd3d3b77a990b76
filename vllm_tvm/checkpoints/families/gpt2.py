"""GPT-2: learned absolute positions, LayerNorm and biases everywhere (the learned-position
definition); llama.cpp's `gpt2` files keep GPT-2's own tensor names and its `Conv1D`
weights' [in, out] layout, transposed."""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture, GGUFKey

GPT2 = "GPT2LMHeadModel"

_MODULES = {
    "attn_norm": "ln_1",
    "attn_qkv": "attn.c_attn",
    "attn_output": "attn.c_proj",
    "ffn_norm": "ln_2",
    "ffn_up": "mlp.c_fc",
    "ffn_down": "mlp.c_proj",
}


def _gguf_config(key: GGUFKey) -> dict[str, Any]:
    """GPT2Config's own keys. llama.cpp runs GPT-2's MLP with ggml's tanh GELU, which is
    HF's `gelu_new`."""
    return {
        "n_embd": key("embedding_length"),
        "n_head": key("attention.head_count"),
        "n_layer": key("block_count"),
        "n_positions": key("context_length"),
        "n_inner": key("feed_forward_length"),
        "layer_norm_epsilon": key("attention.layer_norm_epsilon"),
        "activation_function": "gelu_new",
    }


FAMILIES = (
    FamilySpec(
        name="gpt2",
        architectures=(GPT2,),
        definition="gpt2",
        gguf=(
            GGUFArchitecture(
                "gpt2",
                GPT2,
                {
                    f"{gguf}.{part}": f"{hf}.{part}"
                    for gguf, hf in _MODULES.items()
                    for part in ("weight", "bias")
                },
                global_tensors={
                    "token_embd.weight": "transformer.wte.weight",
                    "position_embd.weight": "transformer.wpe.weight",
                    "output_norm.weight": "transformer.ln_f.weight",
                    "output_norm.bias": "transformer.ln_f.bias",
                    "output.weight": "lm_head.weight",
                },
                block_prefix="transformer.h",
                transposed_tensors=tuple(
                    f"{gguf}.weight" for gguf in ("attn_qkv", "attn_output", "ffn_up", "ffn_down")
                ),
                config_body=_gguf_config,
            ),
        ),
    ),
)
