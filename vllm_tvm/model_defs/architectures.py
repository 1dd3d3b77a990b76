"""Which HF `architectures[0]` names the project can compile, and with what definition.

The registry ties a checkpoint to a model definition: each family module
(checkpoints/families/) names the architectures it serves and the definition that runs
them, and this module holds the definitions by name (`DEFINITIONS`). The compiler asks it
for the nn model, the runtime asks it nothing (the artifact's manifest carries what the
runtime needs). An unknown or refused architecture fails here, at load, by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tvm.relax.frontend import nn

from vllm_tvm.checkpoints.family_index import family_of, refusal_of, served_architectures
from vllm_tvm.model_defs import (
    deepseek,
    gemma3_multimodal,
    learned_positions,
    llama,
    moe,
    qwen2_5_vl,
    qwen3_5_vl,
    qwen3_next,
)
from vllm_tvm.model_defs.checkpoint_layout import CheckpointLayout
from vllm_tvm.model_defs.config import ConfigRecord, parse_llama_family_config
from vllm_tvm.model_defs.deepseek_config import parse_deepseek_config
from vllm_tvm.model_defs.gemma3_multimodal import parse_gemma3_multimodal_config
from vllm_tvm.model_defs.learned_positions_config import parse_learned_position_config
from vllm_tvm.model_defs.moe_config import parse_moe_config
from vllm_tvm.model_defs.qwen2_5_vl import parse_qwen2_5_vl_config
from vllm_tvm.model_defs.qwen3_5_vl import parse_qwen3_5_vl_config
from vllm_tvm.model_defs.qwen3_next_config import parse_hybrid_config

WeightSources = Callable[[str], tuple[list[str], int]]


class UnsupportedArchitectureError(ValueError):
    """The checkpoint's architecture has no model definition here."""


@dataclass(frozen=True)
class ModelFamily:
    """How to build one family: parse its config, build its nn model, map its weights."""

    name: str
    parse_config: Callable[..., ConfigRecord]
    """(HF config, max_model_len=None) -> the parsed config for an engine of that context
    (None: the checkpoint's; only longrope's factor set depends on it, rope_scaling.py)."""
    build_model: Callable[..., nn.Module]
    """(config, dtype, target, attention='tir') -> the exportable model (a family with
    `recurrent` set also takes `kernels=`, the compiler's RecurrentKernels for the target)."""
    weight_sources: WeightSources
    config_weight_sources: Callable[[Any, str], tuple[list[str], int]] | None = None
    """(parsed config, name) -> sources, for families whose names depend on the config
    (the expert count of a stacked expert projection); when set it replaces
    `weight_sources`."""
    recurrent: bool = False
    """Whether the model has recurrent layers, whose kernels the compiler hands `build_model`
    (model definitions never import schedules)."""
    checkpoint_layout: Callable[[Path], CheckpointLayout] | None = None
    """(checkpoint path) -> its tensor-name layout, for families whose names differ between
    checkpoints of one architecture (Gemma 3's vision tower); when set, and the checkpoint
    is known, its sources replace `weight_sources` and its name is in the cache key."""

    def sources_for(self, config: ConfigRecord, model_path: Path | None = None) -> WeightSources:
        """The checkpoint tensors of each parameter of a model built from `config` (read
        from the checkpoint at `model_path`, when given)."""
        if self.checkpoint_layout is not None and model_path is not None:
            return self.checkpoint_layout(model_path).sources
        if self.config_weight_sources is None:
            return self.weight_sources
        sources = self.config_weight_sources
        return lambda name: sources(config, name)


def _context_independent(
    parse: Callable[[dict[str, Any]], ConfigRecord],
) -> Callable[..., ConfigRecord]:
    """`parse` of a family whose config does not depend on the engine's context (no longrope)."""
    return lambda config, max_model_len=None: parse(config)


_LLAMA_FAMILY = ModelFamily(
    name="llama",
    parse_config=parse_llama_family_config,
    build_model=llama.LlamaForCausalLM,
    weight_sources=llama.fused_weight_sources,
)

_MOE_FAMILY = ModelFamily(
    name="moe",
    parse_config=parse_moe_config,
    build_model=moe.MoEForCausalLM,
    weight_sources=llama.fused_weight_sources,
    config_weight_sources=moe.moe_weight_sources,
)

_DEEPSEEK_FAMILY = ModelFamily(
    name="deepseek",
    parse_config=_context_independent(parse_deepseek_config),
    build_model=deepseek.DeepseekForCausalLM,
    weight_sources=llama.fused_weight_sources,
    config_weight_sources=moe.moe_weight_sources,
)

_PREFUSED_LLAMA = ModelFamily(
    name="llama-prefused",
    parse_config=parse_llama_family_config,
    build_model=llama.LlamaForCausalLM,
    weight_sources=llama.prefused_weight_sources,
)

_OPT_FAMILY = ModelFamily(
    name="opt",
    parse_config=_context_independent(parse_learned_position_config),
    build_model=learned_positions.LearnedPositionForCausalLM,
    weight_sources=learned_positions.opt_weight_sources,
)

_GPT2_FAMILY = ModelFamily(
    name="gpt2",
    parse_config=_context_independent(parse_learned_position_config),
    build_model=learned_positions.LearnedPositionForCausalLM,
    weight_sources=learned_positions.gpt2_weight_sources,
)


_GEMMA3_MULTIMODAL = ModelFamily(
    name="gemma3-multimodal",
    parse_config=parse_gemma3_multimodal_config,
    build_model=gemma3_multimodal.Gemma3ForConditionalGeneration,
    weight_sources=gemma3_multimodal.gemma3_multimodal_weight_sources,
    checkpoint_layout=gemma3_multimodal.checkpoint_layout,
)

_QWEN2_5_VL = ModelFamily(
    name="qwen2_5_vl",
    parse_config=parse_qwen2_5_vl_config,
    build_model=qwen2_5_vl.Qwen2_5_VLForConditionalGeneration,
    weight_sources=qwen2_5_vl.qwen2_5_vl_weight_sources,
)

_HYBRID_FAMILY = ModelFamily(
    name="hybrid",
    parse_config=parse_hybrid_config,
    build_model=qwen3_next.HybridForCausalLM,
    weight_sources=llama.fused_weight_sources,
    config_weight_sources=qwen3_next.hybrid_weight_sources,
    recurrent=True,
)

_HYBRID_VL_FAMILY = ModelFamily(
    name="hybrid-vl",
    parse_config=parse_qwen3_5_vl_config,
    build_model=qwen3_5_vl.Qwen3_5VLForConditionalGeneration,
    weight_sources=llama.fused_weight_sources,
    config_weight_sources=qwen3_5_vl.qwen3_5_vl_weight_sources,
    recurrent=True,
)

DEFINITIONS: dict[str, ModelFamily] = {
    family.name: family
    for family in (
        _LLAMA_FAMILY,
        _MOE_FAMILY,
        _DEEPSEEK_FAMILY,
        _PREFUSED_LLAMA,
        _OPT_FAMILY,
        _GPT2_FAMILY,
        _GEMMA3_MULTIMODAL,
        _QWEN2_5_VL,
        _HYBRID_FAMILY,
        _HYBRID_VL_FAMILY,
    )
}
"""The model definitions by the name a family module's `definition` gives
(`llama-prefused`: checkpoints that store q/k/v and gate/up fused; `gemma3-multimodal`: the
decoder of a multimodal Gemma 3 checkpoint with its vision tower; `qwen2_5_vl`: Qwen2.5-VL's
M-RoPE decoder with its vision tower; `hybrid-vl`: Qwen3.5's hybrid decoder with M-RoPE and
its vision tower)."""


def family_for(config: dict[str, Any]) -> ModelFamily:
    """The model family of an HF config dict, or an error naming the architecture."""
    names = config.get("architectures") or []
    supported = ", ".join(served_architectures())
    if not names:
        raise UnsupportedArchitectureError(
            "config.json has no 'architectures' entry; supported: " + supported
        )
    refusal = refusal_of(names[0])
    if refusal is not None:
        raise UnsupportedArchitectureError(
            f"unsupported architecture {names[0]}: {refusal} is not implemented; supported: "
            + supported
        )
    spec = family_of(names[0])
    if spec is None:
        raise UnsupportedArchitectureError(
            f"unsupported architecture {names[0]}; supported: " + supported
        )
    return DEFINITIONS[spec.definition]
