"""The description of a mixture-of-experts decoder (Mixtral, Qwen2-MoE, Qwen3-MoE).

Why a subclass of `LlamaFamilyConfig`: the three families keep the llama-family attention
(GQA, Qwen2's q/k/v bias, Qwen3's q/k RMSNorm) and replace the feed-forward of some or all
layers by routed experts. The attention facts are parsed once, by the llama parser (with
the family's options: checkpoints/families/mixtral.py, qwen_moe.py); this module adds what
routing needs and which layers route, and refuses what the expert layer cannot reproduce
exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vllm_tvm.checkpoints.families.mixtral import MIXTRAL
from vllm_tvm.checkpoints.families.qwen_moe import QWEN2_MOE
from vllm_tvm.checkpoints.family_index import family_of
from vllm_tvm.model_defs.config import (
    LlamaFamilyConfig,
    ModelConfigError,
    parse_llama_family_config,
)


@dataclass(frozen=True)
class MoEConfig(LlamaFamilyConfig):
    """A llama-family decoder whose `sparse_layers` route each token to experts."""

    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = True
    """Divide the chosen experts' probabilities by their sum (Mixtral always does)."""
    shared_expert_intermediate_size: int = 0
    """Size of the always-on expert gated by a sigmoid (Qwen2-MoE); 0 means none."""
    sparse_layers: tuple[int, ...] = ()
    """Layers whose feed-forward is the expert layer; the others are dense SwiGLU."""

    @property
    def expert_block_name(self) -> str:
        """The HF module name of a layer's feed-forward (`block_sparse_moe` in Mixtral)."""
        return "block_sparse_moe" if self.architecture == MIXTRAL else "mlp"

    @property
    def expert_projection_names(self) -> tuple[str, str, str]:
        """HF names of one expert's (gate, up, down) projections."""
        if self.architecture == MIXTRAL:
            return ("w1", "w3", "w2")
        return ("gate_proj", "up_proj", "down_proj")


def _sparse_layers(config: dict[str, Any], layers: int) -> tuple[int, ...]:
    """Which layers route (transformers' rule: not in mlp_only_layers, every step-th)."""
    if config["architectures"][0] == MIXTRAL:
        return tuple(range(layers))
    step = int(config.get("decoder_sparse_step", 1) or 1)
    dense = set(config.get("mlp_only_layers") or [])
    return tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)


def parse_moe_config(config: dict[str, Any], max_model_len: int | None = None) -> MoEConfig:
    """Validate an HF config dict of a mixture-of-experts architecture and normalise it (for
    an engine of `max_model_len` tokens, as `parse_llama_family_config`)."""
    architecture = config["architectures"][0]
    family = family_of(architecture)
    if family is None or family.definition != "moe":
        raise ModelConfigError(f"{architecture} is not a supported mixture-of-experts model")
    base = asdict(parse_llama_family_config(config, max_model_len))
    if base["hidden_act"] != "silu":
        # The stacked expert kernels gate with SiLU (moe.py).
        raise ModelConfigError(
            f"unsupported hidden_act '{base['hidden_act']}' for {architecture}; supported: silu"
        )
    is_mixtral = architecture == MIXTRAL
    # transformers 5 writes Qwen3-MoE's `num_experts` as `num_local_experts`, Mixtral's name.
    experts = int(config.get("num_local_experts") or config.get("num_experts") or 0)
    top_k = int(config.get("num_experts_per_tok") or 0)
    if experts < 1 or not 1 <= top_k <= experts:
        raise ModelConfigError(
            f"{architecture} needs 1 <= num_experts_per_tok <= experts; got {top_k} of {experts}"
        )
    return MoEConfig(
        **base,
        num_experts=experts,
        num_experts_per_tok=top_k,
        moe_intermediate_size=int(
            config["intermediate_size"] if is_mixtral else config["moe_intermediate_size"]
        ),
        norm_topk_prob=True if is_mixtral else bool(config.get("norm_topk_prob", False)),
        shared_expert_intermediate_size=(
            int(config.get("shared_expert_intermediate_size") or 0)
            if architecture == QWEN2_MOE
            else 0
        ),
        sparse_layers=_sparse_layers(config, base["num_hidden_layers"]),
    )
