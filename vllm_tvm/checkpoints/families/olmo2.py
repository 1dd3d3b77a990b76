"""OLMo-2: the Llama definition with RMSNorm on each sublayer's output (no input norms) and
over the whole q / k projections; llama.cpp's `olmo2` files differ only in tensor names."""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.families.llama import BLOCK_TENSORS, QK_NORM
from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture

OLMO2 = "Olmo2ForCausalLM"


def _options(
    config: dict[str, Any], rope_theta: float, local_theta: float | None
) -> dict[str, Any]:
    del config, rope_theta, local_theta
    return {"qk_norm": True, "norm_position": "post", "qk_norm_scope": "projection"}


FAMILIES = (
    FamilySpec(
        name="olmo2",
        architectures=(OLMO2,),
        config_options=_options,
        gguf=(
            GGUFArchitecture(
                "olmo2",
                OLMO2,
                {
                    **{
                        k: v
                        for k, v in BLOCK_TENSORS.items()
                        if k not in ("attn_norm.weight", "ffn_norm.weight")
                    },
                    "post_attention_norm.weight": "post_attention_layernorm.weight",
                    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
                    **QK_NORM,
                },
            ),
        ),
    ),
)
