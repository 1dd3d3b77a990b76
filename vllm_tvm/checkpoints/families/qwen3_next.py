"""Qwen3-Next and Qwen3.5 / Qwen3.6 (dense and MoE): hybrids of Gated DeltaNet linear
attention and gated full attention (model_defs/qwen3_next.py), and the multimodal Qwen3.5 /
Qwen3.6 checkpoints: that decoder as their text tower with M-RoPE and the vision tower
(model_defs/qwen3_5_vl.py).

Served through the recurrent-state pool beside the paged KV cache (runtime/kv/
recurrent_pool.py), whose slots and pools the runner hands the compiled forwards
(tests/test_hybrid_engine.py: greedy tokens equal transformers'). llama.cpp's `qwen3next`,
`qwen35` and `qwen35moe` files: checkpoints/gguf_delta_net.py.
"""

from __future__ import annotations

from typing import Any

from vllm_tvm.checkpoints.family_spec import FamilySpec, ModelConfigError
from vllm_tvm.checkpoints.gguf_delta_net import delta_net_architectures

QWEN3_NEXT = "Qwen3NextForCausalLM"
QWEN3_5 = "Qwen3_5ForCausalLM"
QWEN3_5_MOE = "Qwen3_5MoeForCausalLM"
TEXT_TOWERS = {
    "Qwen3_5ForConditionalGeneration": QWEN3_5,
    "Qwen3_5MoeForConditionalGeneration": QWEN3_5_MOE,
}
"""Multimodal checkpoints and the causal LM of their decoder (config in `text_config`,
weights under TEXT_TOWER_PREFIX; the vision tower beside it)."""
TEXT_TOWER_PREFIX = "model.language_model."
DECODER_PREFIX = "model."


def decoder_architecture(architecture: str) -> str:
    """The causal-LM architecture whose decoder a checkpoint of `architecture` holds."""
    return TEXT_TOWERS.get(architecture, architecture)


def decoder_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config: the text config of a multimodal checkpoint (whose top level
    says whether the head is tied), else the config itself."""
    architecture = config["architectures"][0]
    if architecture not in TEXT_TOWERS:
        return config
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ModelConfigError(f"config.json of {architecture} has no 'text_config'")
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    return {**text, "architectures": [architecture], "tie_word_embeddings": tied}


def checkpoint_name(architecture: str, param_name: str) -> str:
    """A decoder tensor's name in a checkpoint of `architecture` (`model.` or the text
    tower's prefix; the head keeps its name)."""
    if architecture in TEXT_TOWERS and param_name.startswith(DECODER_PREFIX):
        return TEXT_TOWER_PREFIX + param_name.removeprefix(DECODER_PREFIX)
    return param_name


FAMILIES = (
    FamilySpec(
        name="qwen3-next",
        architectures=(QWEN3_NEXT, QWEN3_5, QWEN3_5_MOE),
        definition="hybrid",
        gguf=delta_net_architectures(QWEN3_NEXT, QWEN3_5, QWEN3_5_MOE),
    ),
    FamilySpec(
        name="qwen3_5-vl",
        architectures=tuple(TEXT_TOWERS),
        definition="hybrid-vl",
    ),
)
