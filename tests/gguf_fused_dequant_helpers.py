"""Helpers for the fused-dequantization tests: tiny quantized GGUF files and a greedy driver.

The files are tiny random llama models converted the way llama.cpp converts them
(gguf_synth.py), with every matrix in one quant type; the driver runs a compiled artifact
token by token through `ModelRunner`, so two artifacts can be compared on the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf_synth import convert, model_metadata, random_hf_model, write_gguf
from transformers import LlamaConfig, LlamaForCausalLM

from vllm_tvm.runtime.model_runner import ModelRunner

# Rows of every matrix are whole 32-value blocks; two KV heads exercise GQA and the Q/K
# row permutation of llama files; an untied lm_head is a quantized NTLinear of its own.
TINY_CONFIG = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    bos_token_id=1,
    eos_token_id=2,
)
# K-quant rows are 256-value super-blocks.
K_QUANT_SIZES = dict(hidden_size=256, intermediate_size=256)
K_QUANTS = (Q.Q4_K, Q.Q5_K, Q.Q6_K)
PROMPT = [5, 17, 33, 8, 61, 90, 3]


def tiny_config(tied: bool = False, k_quant_sizes: bool = False) -> LlamaConfig:
    """The tiny llama config (tied or untied embeddings; K-quant-sized rows or not)."""
    sizes = K_QUANT_SIZES if k_quant_sizes else {}
    return LlamaConfig(**{**TINY_CONFIG, **sizes}, tie_word_embeddings=tied)


def write_quantized_llama(
    path: Path, types: dict[str, Q] | Q, tied: bool = False, seed: int = 0
) -> Path:
    """A tiny llama GGUF with its matrices in `types` (one type for all, or per HF name;
    unnamed matrices stay F32). Rows are K-quant sized when any type is a K-quant."""
    chosen_types = set(types.values()) if isinstance(types, dict) else {types}
    config = tiny_config(tied, k_quant_sizes=bool(chosen_types & set(K_QUANTS)))
    state = random_hf_model(LlamaForCausalLM, config, seed)
    chosen = (
        types if isinstance(types, dict) else {n: types for n, v in state.items() if v.ndim == 2}
    )
    conversion = convert(state, "llama", config, chosen, seed)
    return write_gguf(path, "llama", model_metadata("llama", config), conversion.tensors)


@dataclass
class GreedyRun:
    """Token ids chosen, and the fp32 logits each was chosen from (one row per step)."""

    tokens: list[int]
    logits: np.ndarray


def greedy(artifact: Path, model: Path, steps: int, forced: list[int] | None = None) -> GreedyRun:
    """Prefill PROMPT, then decode `steps` tokens greedily (or feed `forced` tokens instead,
    so two artifacts see the same inputs); logits of the prefill's last token and of every
    decode step."""
    runner = ModelRunner(artifact, model, show_progress=False, max_model_len=128)
    runner.kv_cache.add_sequence(0)
    rows = [runner.prefill([0], [PROMPT])[0]]
    tokens = [int(np.argmax(rows[-1]))]
    for step in range(steps - 1):
        fed = tokens[-1] if forced is None else forced[step]
        rows.append(runner.decode([0], [fed])[0])
        tokens.append(int(np.argmax(rows[-1])))
    return GreedyRun(tokens, np.stack(rows))
