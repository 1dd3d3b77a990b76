"""Which HF `architectures[0]` names the project can compile, and with what definition.

The registry is the single place that ties a checkpoint to a model definition: the compiler
asks it for the nn model, the runtime asks it nothing (the artifact's manifest carries what
the runtime needs). An unknown architecture fails here, at load, by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tvm.relax.frontend import nn

from vllm_tvm.model_defs import llama
from vllm_tvm.model_defs.config import LlamaFamilyConfig, parse_llama_family_config


class UnsupportedArchitectureError(ValueError):
    """The checkpoint's architecture has no model definition here."""


@dataclass(frozen=True)
class ModelFamily:
    """How to build one family: parse its config, build its nn model, map its weights."""

    name: str
    parse_config: Callable[[dict[str, Any]], LlamaFamilyConfig]
    build_model: Callable[..., nn.Module]
    """(config, dtype, target, attention='tir') -> the exportable model."""
    weight_sources: Callable[[str], tuple[list[str], int]]


_LLAMA_FAMILY = ModelFamily(
    name="llama",
    parse_config=parse_llama_family_config,
    build_model=llama.LlamaForCausalLM,
    weight_sources=llama.fused_weight_sources,
)


def _text_tower_sources(param_name: str) -> tuple[list[str], int]:
    """Checkpoint names of a multimodal Gemma 3's text tower (`language_model.` + the
    Llama-family names); the vision tower's tensors are never read."""
    sources, axis = llama.fused_weight_sources(param_name)
    return [f"language_model.{source}" for source in sources], axis


_GEMMA3_TEXT_TOWER = ModelFamily(
    name="gemma3-text-tower",
    parse_config=parse_llama_family_config,
    build_model=llama.LlamaForCausalLM,
    weight_sources=_text_tower_sources,
)

ARCHITECTURES: dict[str, ModelFamily] = {
    "LlamaForCausalLM": _LLAMA_FAMILY,
    "MistralForCausalLM": _LLAMA_FAMILY,
    "Qwen2ForCausalLM": _LLAMA_FAMILY,
    "Qwen3ForCausalLM": _LLAMA_FAMILY,
    # Gemma: the same definition with Gemma's options (gemma_options.py).
    "GemmaForCausalLM": _LLAMA_FAMILY,
    "Gemma2ForCausalLM": _LLAMA_FAMILY,
    "Gemma3ForCausalLM": _LLAMA_FAMILY,
    # Text in, text out: image input does not exist in the engine.
    "Gemma3ForConditionalGeneration": _GEMMA3_TEXT_TOWER,
}


def family_for(config: dict[str, Any]) -> ModelFamily:
    """The model family of an HF config dict, or an error naming the architecture."""
    names = config.get("architectures") or []
    if not names:
        raise UnsupportedArchitectureError(
            "config.json has no 'architectures' entry; supported: " + ", ".join(ARCHITECTURES)
        )
    family = ARCHITECTURES.get(names[0])
    if family is None:
        raise UnsupportedArchitectureError(
            f"unsupported architecture {names[0]}; supported: " + ", ".join(ARCHITECTURES)
        )
    return family
