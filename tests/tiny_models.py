"""Tiny random HF checkpoints (real config.json / tokenizer.json / safetensors layout).

Each is made by transformers itself, so the checkpoint is exactly what a user would point
vllm-tvm at, and transformers on the same files is the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ZEN_OF_PYTHON = (
    "The Zen of Python, by Tim Peters\n"
    "\n"
    "Beautiful is better than ugly.\n"
    "Explicit is better than implicit.\n"
    "Simple is better than complex.\n"
    "Complex is better than complicated.\n"
    "Flat is better than nested.\n"
    "Sparse is better than dense.\n"
    "Readability counts.\n"
    "Special cases aren't special enough to break the rules.\n"
    "Although practicality beats purity.\n"
    "Errors should never pass silently.\n"
    "Unless explicitly silenced.\n"
    "In the face of ambiguity, refuse the temptation to guess.\n"
    "There should be one-- and preferably only one --obvious way to do it.\n"
    "Although that way may not be obvious at first unless you're Dutch.\n"
    "Now is better than never.\n"
    "Although never is often better than *right* now.\n"
    "If the implementation is hard to explain, it's a bad idea.\n"
    "If the implementation is easy to explain, it may be a good idea.\n"
    "Namespaces are one honking great idea -- let's do more of those!"
)
"""PEP 20's text, plain English prose for the tokenizer's corpus (written out here: the
`this` module that holds it prints it when imported)."""

CORPUS = [
    ZEN_OF_PYTHON,
    "Once upon a time there was a little compiler that turned models into fast code. "
    "The quick brown fox jumps over the lazy dog; 0123456789 + - * / = ? ! (ok) [yes] {no}.",
    "Paged attention keeps keys and values in blocks; a scheduler batches requests together.",
]

TOKENIZER_VOCAB = 512


@dataclass(frozen=True)
class TinyModelSpec:
    """One tiny checkpoint: HF config class name and the config overrides that matter."""

    name: str
    config_class: str
    overrides: dict[str, Any]


BASE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "initializer_range": 0.2,
    "bos_token_id": 0,
    "eos_token_id": 1,
}

TINY_MODELS = {
    spec.name: spec
    for spec in [
        TinyModelSpec("llama", "LlamaConfig", {}),
        # One KV head: a tensor-parallel split replicates it on every rank.
        TinyModelSpec("llama_one_kv_head", "LlamaConfig", {"num_key_value_heads": 1}),
        TinyModelSpec(
            "llama3_rope_tied",
            "LlamaConfig",
            {
                "tie_word_embeddings": True,
                "rope_theta": 500000.0,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                },
            },
        ),
        TinyModelSpec(
            "llama_linear_rope_mha",
            "LlamaConfig",
            {"num_key_value_heads": 4, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        ),
        TinyModelSpec("mistral", "MistralConfig", {"sliding_window": None}),
        TinyModelSpec("qwen2_tied_bias", "Qwen2Config", {"tie_word_embeddings": True}),
        TinyModelSpec("qwen3_qknorm", "Qwen3Config", {"head_dim": 32}),
        TinyModelSpec(
            "mixtral_top2", "MixtralConfig", {"num_local_experts": 4, "num_experts_per_tok": 2}
        ),
        TinyModelSpec(
            "qwen2_moe_shared_dense_first",
            "Qwen2MoeConfig",
            {
                "num_experts": 8,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 32,
                "shared_expert_intermediate_size": 48,
                "mlp_only_layers": [0],
            },
        ),
        TinyModelSpec(
            "deepseek_v3_mla_qlora_groups",
            "DeepseekV3Config",
            {
                "num_key_value_heads": 4,
                "q_lora_rank": 48,
                "kv_lora_rank": 32,
                "qk_nope_head_dim": 16,
                "qk_rope_head_dim": 8,
                "v_head_dim": 16,
                "moe_intermediate_size": 32,
                "n_routed_experts": 8,
                "num_experts_per_tok": 2,
                "n_shared_experts": 1,
                "first_k_dense_replace": 1,
                "n_group": 4,
                "topk_group": 2,
                "rope_parameters": {
                    "rope_type": "yarn",
                    "rope_theta": 10000.0,
                    "factor": 4.0,
                    "original_max_position_embeddings": 128,
                    "beta_fast": 32,
                    "beta_slow": 1,
                    "mscale": 0.8,
                    "mscale_all_dim": 1.0,
                },
            },
        ),
        TinyModelSpec(
            "deepseek_v2_mla_greedy",
            "DeepseekV2Config",
            {
                "num_key_value_heads": 4,
                "q_lora_rank": None,
                "kv_lora_rank": 32,
                "qk_nope_head_dim": 16,
                "qk_rope_head_dim": 8,
                "v_head_dim": 24,
                "moe_intermediate_size": 32,
                "n_routed_experts": 6,
                "num_experts_per_tok": 3,
                "n_shared_experts": 2,
                "first_k_dense_replace": 1,
                "routed_scaling_factor": 1.5,
            },
        ),
        TinyModelSpec(
            "qwen3_moe_sparse_step",
            "Qwen3MoeConfig",
            {
                "num_hidden_layers": 3,
                "num_experts": 8,
                "num_experts_per_tok": 3,
                "moe_intermediate_size": 32,
                "decoder_sparse_step": 2,
                "norm_topk_prob": True,
                "head_dim": 32,
            },
        ),
        # Phi-3: prefused qkv / gate_up, 12 of 16 channels rotate, longrope short factors.
        TinyModelSpec(
            "phi3_longrope_partial",
            "Phi3Config",
            {
                "pad_token_id": 1,
                "partial_rotary_factor": 0.75,
                "original_max_position_embeddings": 128,
                "rope_scaling": {
                    "rope_type": "longrope",
                    "short_factor": [1.0, 1.3, 1.7, 2.2, 2.9, 3.5],
                    "long_factor": [4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
                },
            },
        ),
        TinyModelSpec(
            "olmo2_yarn",
            "Olmo2Config",
            {
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 128,
                },
            },
        ),
        TinyModelSpec(
            "granite_dynamic_tied",
            "GraniteConfig",
            {
                "tie_word_embeddings": True,
                "embedding_multiplier": 2.0,
                "residual_multiplier": 0.5,
                "attention_multiplier": 0.3,
                "logits_scaling": 4.0,
                "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
            },
        ),
        # Learned positions, LayerNorm, biases: GPT-2 (Conv1D weights, GELU-tanh, tied head)
        # and OPT (position offset 2, ReLU, untied head).
        TinyModelSpec("gpt2_tied", "GPT2Config", {}),
        TinyModelSpec(
            "opt_untied",
            "OPTConfig",
            {"ffn_dim": 128, "word_embed_proj_dim": 64, "tie_word_embeddings": False},
        ),
        # Gemma: windows shorter than prompt + 40 new tokens, a final soft-cap that bites on
        # these weights (attention soft-capping: tests/test_attention_softcap.py), GQA, tied
        # (Gemma 1/3) and untied (Gemma 2) heads.
        TinyModelSpec("gemma", "GemmaConfig", {"head_dim": 16}),
        TinyModelSpec(
            "gemma2_window_softcap",
            "Gemma2Config",
            {
                "head_dim": 16,
                "num_hidden_layers": 3,
                "sliding_window": 24,
                "query_pre_attn_scalar": 24,
                "attn_logit_softcapping": None,
                "final_logit_softcapping": 3.0,
                "tie_word_embeddings": False,
            },
        ),
        TinyModelSpec(
            "gemma3_local_rope",
            "Gemma3TextConfig",
            {
                "head_dim": 16,
                "num_hidden_layers": 4,
                "sliding_window": 24,
                "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
                "query_pre_attn_scalar": 16,
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                },
            },
        ),
    ]
}


def train_tokenizer(path: Path) -> Tokenizer:
    """A byte-level BPE with BOS/EOS specials, trained on a small fixed corpus."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 4, trainer)
    tokenizer.save(str(path / "tokenizer.json"))
    return tokenizer


def make_tiny_model(spec: TinyModelSpec, path: Path, seed: int = 0) -> Path:
    """Write the checkpoint of `spec` into `path`: config, weights and tokenizer."""
    import transformers

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(path)
    config_class = getattr(transformers, spec.config_class)
    config = config_class(**{**BASE, "vocab_size": tokenizer.get_vocab_size(), **spec.overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # DeepSeek-V3 initialises its routing bias to zeros: make it matter
        for buffer_name, buffer in model.named_buffers():
            if buffer_name.endswith("e_score_correction_bias"):
                buffer.uniform_(-0.2, 0.2)
    model.save_pretrained(path, safe_serialization=True)
    return path


def load_oracle(path: Path) -> Any:
    """transformers' model on the same files, fp32, eval mode."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
