"""The one model shape every peer is measured on: Llama-3.1-8B (random weights).

Why: vLLM, HF transformers, llama.cpp and our own benchmark must run the same shape, so it
lives in one place. `config_json()` is the Hugging Face `config.json` of Llama-3.1-8B as
published (legacy `rope_scaling` + `rope_theta` keys, which vLLM 0.33 and transformers 5.x
both read), and `write_config_dir()` makes a model directory holding only that file — all
vLLM's `load_format="dummy"` and transformers' `from_config` need.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

SHAPE_CONFIG = Path(__file__).resolve().parents[1] / "configs/llama-3.1-8b-shape/config.json"
"""The shape's one definition, shared with `vllm-tvm bench --model benchmarks/configs/...`."""


@dataclass(frozen=True)
class LlamaShape:
    """Hyper-parameters of a Llama-3-family decoder (names as in the HF config)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    rope_factor: float
    rope_low_freq_factor: float
    rope_high_freq_factor: float
    rope_original_max_position_embeddings: int
    bos_token_id: int
    eos_token_id: int


def shape_from_config(path: Path) -> LlamaShape:
    """The shape an HF Llama-3 `config.json` describes (first EOS id when it lists several)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    rope = config["rope_scaling"]
    eos = config["eos_token_id"]
    plain = {name: config[name] for name in LlamaShape.__dataclass_fields__ if name in config}
    return LlamaShape(
        **{**plain, "eos_token_id": eos[0] if isinstance(eos, list) else eos},
        rope_factor=rope["factor"],
        rope_low_freq_factor=rope["low_freq_factor"],
        rope_high_freq_factor=rope["high_freq_factor"],
        rope_original_max_position_embeddings=rope["original_max_position_embeddings"],
    )


LLAMA_31_8B = shape_from_config(SHAPE_CONFIG)


def tiny_shape(**overrides: int | float) -> LlamaShape:
    """A small shape of the same family for CPU tests (2 layers, hidden 64, vocab 512)."""
    small = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "vocab_size": 512,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    return replace(LLAMA_31_8B, **{**small, **overrides})


def config_json(shape: LlamaShape = LLAMA_31_8B) -> dict:
    """The HF `config.json` dict for `shape` (bf16, untied embeddings, llama3 rope scaling)."""
    s = asdict(shape)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": s["hidden_size"],
        "intermediate_size": s["intermediate_size"],
        "num_hidden_layers": s["num_hidden_layers"],
        "num_attention_heads": s["num_attention_heads"],
        "num_key_value_heads": s["num_key_value_heads"],
        "head_dim": s["head_dim"],
        "vocab_size": s["vocab_size"],
        "max_position_embeddings": s["max_position_embeddings"],
        "rms_norm_eps": s["rms_norm_eps"],
        "rope_theta": s["rope_theta"],
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": s["rope_factor"],
            "low_freq_factor": s["rope_low_freq_factor"],
            "high_freq_factor": s["rope_high_freq_factor"],
            "original_max_position_embeddings": s["rope_original_max_position_embeddings"],
        },
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": s["bos_token_id"],
        "eos_token_id": s["eos_token_id"],
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
    }


def write_config_dir(directory: Path, shape: LlamaShape = LLAMA_31_8B) -> Path:
    """Create `directory` with only `config.json` in it; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config_json(shape), indent=1))
    return directory


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 llama31_8b.py DIR  (writes DIR/config.json of Llama-3.1-8B)")
    print(write_config_dir(Path(sys.argv[1])) / "config.json")
