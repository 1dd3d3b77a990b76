"""CPU decode step time of a random mixture-of-experts model: 64 experts top-2 against the
same model with 8 experts top-2 and against its dense equivalent, as raw JSON.

Why: the expert layer (model_defs/moe.py) claims a decode step reads only the chosen
experts' weights. Then a 64-expert model (8x the expert bytes) decodes about as fast as the
8-expert one, and both about as fast as the dense model whose feed-forward equals the two
active experts (intermediate = 2 x moe_intermediate). A layer that read every expert would
make the 64-expert step several times slower.

The checkpoints are written here (Qwen3-MoE / Qwen3 safetensors layouts, normal(0, 0.02)
weights from a fixed seed), compiled for this CPU in float32, and run through `ModelRunner`
(runner level: forward calls, no scheduler or sampling). The three runners are timed in
interleaved rounds, so load from other jobs on a shared machine falls on all arms alike.

usage: python3 benchmarks/moe_cpu_decode.py --out benchmarks/results/FILE.json
           [--hidden 512] [--moe-intermediate 256] [--layers 4] [--rounds 5] [--steps 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.benchmarking.report import host, versions
from vllm_tvm.compiler.build import compile_cached, make_request
from vllm_tvm.runtime.model.runner import ModelRunner

VOCAB = 1024
PROMPT_LEN = 32


def _config(arm: str, hidden: int, moe_intermediate: int, layers: int) -> dict[str, Any]:
    """The HF config of one arm: `moe64`, `moe8` (top-2) or `dense`."""
    common = {
        "vocab_size": VOCAB,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": hidden // 8,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    if arm == "dense":
        return {
            **common,
            "architectures": ["Qwen3ForCausalLM"],
            "intermediate_size": 2 * moe_intermediate,
        }
    return {
        **common,
        "architectures": ["Qwen3MoeForCausalLM"],
        "intermediate_size": 2 * moe_intermediate,
        "moe_intermediate_size": moe_intermediate,
        "num_experts": 64 if arm == "moe64" else 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
    }


def _tensors(config: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights under the checkpoint names of `config`'s architecture."""
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (VOCAB, hidden),
        "model.norm.weight": (hidden,),
        "lm_head.weight": (VOCAB, hidden),
    }
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes |= {
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": (head_dim,),
            p + "self_attn.k_norm.weight": (head_dim,),
        }
        if "num_experts" not in config:
            inter = config["intermediate_size"]
            shapes |= {
                p + "mlp.gate_proj.weight": (inter, hidden),
                p + "mlp.up_proj.weight": (inter, hidden),
                p + "mlp.down_proj.weight": (hidden, inter),
            }
            continue
        inter = config["moe_intermediate_size"]
        shapes[p + "mlp.gate.weight"] = (config["num_experts"], hidden)
        for expert in range(config["num_experts"]):
            e = f"{p}mlp.experts.{expert}."
            shapes |= {
                e + "gate_proj.weight": (inter, hidden),
                e + "up_proj.weight": (inter, hidden),
                e + "down_proj.weight": (hidden, inter),
            }
    return {
        name: (
            np.ones(shape, np.float32)
            if name.endswith("norm.weight")
            else rng.normal(0.0, 0.02, shape).astype(np.float32)
        )
        for name, shape in shapes.items()
    }


def _write_checkpoint(path: Path, config: dict[str, Any], seed: int) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file(_tensors(config, np.random.default_rng(seed)), str(path / "model.safetensors"))
    return path


def _decode_steps(runner: ModelRunner, seq_id: int, steps: int) -> list[float]:
    """Seconds of each of `steps` batch-1 decode steps after a PROMPT_LEN-token prefill."""
    runner.kv_cache.add_sequence(seq_id)
    try:
        logits = runner.prefill([seq_id], [list(range(2, 2 + PROMPT_LEN))])
        token = int(np.argmax(logits[-1]))
        seconds = []
        for _ in range(steps):
            start = time.perf_counter()
            logits = runner.decode([seq_id], [token])
            seconds.append(time.perf_counter() - start)
            token = int(np.argmax(logits[-1]))
        return seconds
    finally:
        runner.kv_cache.remove_sequence(seq_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--moe-intermediate", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    arms = ("moe64", "moe8", "dense")
    runners: dict[str, ModelRunner] = {}
    configs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for seed, arm in enumerate(arms):
            configs[arm] = _config(arm, args.hidden, args.moe_intermediate, args.layers)
            checkpoint = _write_checkpoint(Path(scratch) / arm, configs[arm], seed)
            artifact = compile_cached(
                make_request(CompileOptions(checkpoint, dtype="float32")), False
            )
            runners[arm] = ModelRunner(artifact, checkpoint, "cpu", 256, show_progress=False)
    raw: dict[str, list[float]] = {arm: [] for arm in arms}
    for round_index in range(args.rounds + 1):
        for arm in arms:
            seconds = _decode_steps(runners[arm], round_index, args.steps)
            if round_index:  # round 0 warms every arm up
                raw[arm].extend(seconds)
    medians = {arm: statistics.median(values) for arm, values in raw.items()}
    expert_bytes = {
        arm: 4 * 3 * args.hidden * args.moe_intermediate * config.get("num_experts", 0)
        for arm, config in configs.items()
    }
    report = {
        "benchmark": "moe_cpu_decode",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "level": "runner",
        "dtype": "float32",
        "batch": 1,
        "prompt_len": PROMPT_LEN,
        "host": host(),
        "versions": versions(),
        "load_average_at_end": os.getloadavg(),
        "configs": configs,
        "expert_bytes_per_layer": expert_bytes,
        "decode_step_median_ms": {arm: 1e3 * value for arm, value in medians.items()},
        "moe64_over_moe8": medians["moe64"] / medians["moe8"],
        "moe64_over_dense": medians["moe64"] / medians["dense"],
        "raw_step_seconds": raw,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("decode_step_median_ms", "moe64_over_moe8")}))


if __name__ == "__main__":
    main()
