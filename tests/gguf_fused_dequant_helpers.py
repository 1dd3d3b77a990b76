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

from vllm_tvm.runtime.model.runner import ModelRunner

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
# K-quant rows are 256-value super-blocks; two per row, because dlight's GPU GEMV declines a
# row of one (its super-block index is then a constant).
K_QUANT_SIZES = dict(hidden_size=512, intermediate_size=512)
K_QUANTS = (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)
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
    for tensor in conversion.tensors:
        if tensor.qtype in K_QUANTS:
            _shrink_super_block_scales(tensor.data, tensor.qtype)
    return write_gguf(path, "llama", model_metadata("llama", config), conversion.tensors)


# Bytes per K-quant block, and offsets of its fp16 super-block scales (d, and dmin).
_K_BLOCK_BYTES = {Q.Q2_K: 84, Q.Q3_K: 110, Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210}
_K_SCALE_OFFSETS = {
    Q.Q2_K: (80, 82),
    Q.Q3_K: (108,),
    Q.Q4_K: (0, 2),
    Q.Q5_K: (0, 2),
    Q.Q6_K: (208,),
}
K_SCALE_SHRINK = 1 / 16
"""gguf_synth's random K-quant blocks give weights of magnitude up to ~10 that make a
random model's activations explode; scaled down they keep its logits near 10, like the
other files (the blocks stay valid: only the stored fp16 scales change)."""


def _shrink_super_block_scales(rows: np.ndarray, qtype: Q) -> None:
    """Multiply the fp16 super-block scales of K-quant rows (bytes) by K_SCALE_SHRINK."""
    blocks = rows.reshape(-1, _K_BLOCK_BYTES[qtype])
    for offset in _K_SCALE_OFFSETS[qtype]:
        scales = blocks[:, offset : offset + 2].copy().view(np.float16)
        shrunk = (scales.astype(np.float32) * K_SCALE_SHRINK).astype(np.float16)
        blocks[:, offset : offset + 2] = shrunk.view(np.uint8)


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


def batched_logits(artifact: Path, model: Path, prompts: list[list[int]], steps: int) -> np.ndarray:
    """Logits of a ragged prefill of all `prompts` together, then of `steps` batched decode
    steps feeding every sequence the fixed token `step + 3` (same inputs for any artifact)."""
    runner = ModelRunner(
        artifact, model, show_progress=False, max_model_len=128, max_batch_size=len(prompts)
    )
    seq_ids = list(range(len(prompts)))
    for seq_id in seq_ids:
        runner.kv_cache.add_sequence(seq_id)
    rows = [runner.prefill(seq_ids, prompts)]
    for step in range(steps):
        rows.append(runner.decode(seq_ids, [step + 3] * len(seq_ids)))
    return np.concatenate(rows)
