"""Phi-3: the Llama definition on checkpoints that fuse q/k/v and gate/up, with a partial
rotary and longrope; llama.cpp's `phi3` files store the longrope factors as tensors.

Phi-3's partial rotary is read from HF configs by every llama-shaped family
(model_defs/rope_scaling.py); what is Phi-3's own is how llama.cpp's converter spells it: a
`rope.dimension_count` below the head size, the factors as tensors, an attention factor and
an original context, which are turned back into the HF keys here. The fused matrices do not
split for tensor parallelism (model_defs/tensor_parallel.py refuses them by name).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vllm_tvm.checkpoints.family_spec import FamilySpec, GGUFArchitecture, GGUFKey
from vllm_tvm.checkpoints.gguf_file import GGUFFile
from vllm_tvm.checkpoints.gguf_reader import float32_decimal

PHI3 = "Phi3ForCausalLM"
ROPE_FACTORS_LONG = "rope_factors_long.weight"
ROPE_FACTORS_SHORT = "rope_factors_short.weight"
"""Phi-3's longrope factors, one per rotary frequency; folded into `rope_scaling`."""


def _gguf_keys(reader: GGUFFile, key: GGUFKey, config: dict[str, Any]) -> dict[str, Any]:
    """Partial rotary, the sliding window (0: none) and longrope from the factor tensors.

    The converter writes `rope.scaling.attn_factor` as transformers derives it from the
    context lengths; a file whose factor differs is refused (the model would compute
    transformers' value).
    """
    head_dim = config["head_dim"]
    rope_dims = int(key("rope.dimension_count", head_dim))
    if rope_dims > head_dim:
        raise ValueError(
            f"unsupported phi3.rope.dimension_count {rope_dims}; supported: at most the head "
            f"size {head_dim}"
        )
    options: dict[str, Any] = {}
    if rope_dims != head_dim:
        options["partial_rotary_factor"] = rope_dims / head_dim
    window = key("attention.sliding_window", 0)
    if window:
        options["sliding_window"] = window
    original = key("rope.scaling.original_context_length", None)
    if original is not None:
        options["original_max_position_embeddings"] = original
    factors = {
        t.name: t for t in reader.tensors if t.name in (ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT)
    }
    if not factors:
        return options
    if len(factors) != 2:
        raise ValueError(
            f"unsupported Phi-3 GGUF with only {', '.join(factors)}; supported: both "
            f"{ROPE_FACTORS_LONG} and {ROPE_FACTORS_SHORT}, or neither"
        )
    context = int(config["max_position_embeddings"])
    _check_longrope_attention_factor(key("rope.scaling.attn_factor", None), context, original)
    options["rope_scaling"] = {
        "rope_type": "longrope",
        "long_factor": _factors(factors[ROPE_FACTORS_LONG].data),
        "short_factor": _factors(factors[ROPE_FACTORS_SHORT].data),
    }
    return options


def _factors(values: np.ndarray) -> list[float]:
    """Float32 factors as the decimals the original config.json had."""
    return [float32_decimal(float(v)) for v in np.asarray(values, np.float32).ravel()]


def _check_longrope_attention_factor(
    value: float | None, context: int, original: int | None
) -> None:
    if value is None:
        return
    scale = context / (original or context)
    derived = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
    if np.float32(value) != np.float32(derived):
        raise ValueError(
            f"unsupported phi3.rope.scaling.attn_factor {value}; supported: {derived:.7g}, the "
            f"longrope factor of context {context} over {original} that transformers derives"
        )


FAMILIES = (
    FamilySpec(
        name="phi3",
        architectures=(PHI3,),
        definition="llama-prefused",
        gguf=(
            GGUFArchitecture(
                "phi3",
                PHI3,
                {
                    "attn_norm.weight": "input_layernorm.weight",
                    "attn_qkv.weight": "self_attn.qkv_proj.weight",
                    "attn_output.weight": "self_attn.o_proj.weight",
                    "ffn_norm.weight": "post_attention_layernorm.weight",
                    # gate and up rows, as HF fuses them
                    "ffn_up.weight": "mlp.gate_up_proj.weight",
                    "ffn_down.weight": "mlp.down_proj.weight",
                },
                config_tensors=(ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT),
                partial_rotary=True,
                config_keys=_gguf_keys,
            ),
        ),
    ),
)
