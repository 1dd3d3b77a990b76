"""Engine throughput on the CPU at several concurrencies, for a random 0.5B Llama.

The model has Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 query / 2 KV heads of 64,
MLP 4864, vocabulary 151936, tied embeddings) as a LlamaForCausalLM with random weights,
written here as float32 safetensors with numpy (nothing is downloaded), plus a small BPE
tokenizer (prompts are random token ids and nothing is detokenized, so its vocabulary
does not matter). The artifact compiles on first use into the usual cache.

For each concurrency C, `--num-prompts` requests (default 2 x C) of `--input-len` random
prompt tokens each generate exactly `--output-len` tokens (ignore_eos), with C requests
in flight at all times (a new one is added as one finishes) and max_num_seqs = C.
Reported per level: output and total tokens per second, requests per second, mean time to
first token and mean time per output token. Run it on an otherwise idle machine, e.g.

    python benchmarks/engine_throughput.py --concurrency 1 4 16 --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

SHAPE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "float32",
}
DEFAULT_MODEL_DIR = Path.home() / ".cache" / "vllm_tvm" / "bench" / "llama-0.5b-random"


def write_random_model(path: Path, seed: int = 0) -> Path:
    """Write config.json, model.safetensors (random, std 0.02) and tokenizer.json."""
    from safetensors.numpy import save_file

    if (path / "model.safetensors").is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    hidden, inter = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    kv = SHAPE["num_key_value_heads"] * SHAPE["head_dim"]

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    tensors = {"model.embed_tokens.weight": normal(SHAPE["vocab_size"], hidden)}
    tensors["model.norm.weight"] = np.ones(hidden, np.float32)
    for layer in range(SHAPE["num_hidden_layers"]):
        prefix = f"model.layers.{layer}"
        tensors.update(
            {
                f"{prefix}.self_attn.q_proj.weight": normal(hidden, hidden),
                f"{prefix}.self_attn.k_proj.weight": normal(kv, hidden),
                f"{prefix}.self_attn.v_proj.weight": normal(kv, hidden),
                f"{prefix}.self_attn.o_proj.weight": normal(hidden, hidden),
                f"{prefix}.mlp.gate_proj.weight": normal(inter, hidden),
                f"{prefix}.mlp.up_proj.weight": normal(inter, hidden),
                f"{prefix}.mlp.down_proj.weight": normal(hidden, inter),
                f"{prefix}.input_layernorm.weight": np.ones(hidden, np.float32),
                f"{prefix}.post_attention_layernorm.weight": np.ones(hidden, np.float32),
            }
        )
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(SHAPE, indent=2))
    _write_tokenizer(path)
    return path


def _write_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([__doc__ or "benchmark"] * 4, trainer)
    tokenizer.save(str(path / "tokenizer.json"))


def run_level(llm, concurrency: int, num_prompts: int, input_len: int, output_len: int, seed: int):
    """Run one concurrency level on a fresh engine state; its measurements."""
    from vllm_tvm.runtime.sampling_params import SamplingParams

    engine = llm.engine
    engine.reset_prefix_cache()
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(2, SHAPE["vocab_size"], input_len).tolist() for _ in range(num_prompts)]
    params = SamplingParams(
        temperature=0.0, max_tokens=output_len, ignore_eos=True, detokenize=False
    )
    pending = list(enumerate(prompts))
    finished = []
    in_flight = 0
    started = time.perf_counter()
    while pending or in_flight:
        while pending and in_flight < concurrency:
            index, prompt = pending.pop(0)
            engine.add_request(f"{concurrency}-{index}", prompt, params, output_kind="final_only")
            in_flight += 1
        for output in engine.step():
            if output.finished:
                finished.append(output)
                in_flight -= 1
    elapsed = time.perf_counter() - started
    generated = sum(len(o.outputs[0].token_ids) for o in finished)
    ttft = [o.metrics.time_to_first_token for o in finished]
    tpot = [o.metrics.decode_seconds / o.metrics.decode_tokens for o in finished]
    return {
        "concurrency": concurrency,
        "num_prompts": num_prompts,
        "seconds": round(elapsed, 3),
        "output_tokens_per_second": round(generated / elapsed, 3),
        "total_tokens_per_second": round((generated + input_len * num_prompts) / elapsed, 3),
        "requests_per_second": round(num_prompts / elapsed, 4),
        "mean_ttft_seconds": round(float(np.mean(ttft)), 4),
        "mean_tpot_seconds": round(float(np.mean(tpot)), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--num-prompts", type=int, default=None, help="per level (2 x C)")
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()

    from vllm_tvm.runtime.llm import LLM

    model_dir = write_random_model(args.model_dir)
    started = time.perf_counter()
    llm = LLM(
        model_dir,
        max_num_seqs=max(args.concurrency),
        max_num_batched_tokens=args.max_num_batched_tokens,
        show_progress=not args.json,
    )
    load_seconds = time.perf_counter() - started
    levels = [
        run_level(
            llm,
            concurrency,
            args.num_prompts or 2 * concurrency,
            args.input_len,
            args.output_len,
            args.seed,
        )
        for concurrency in args.concurrency
    ]
    report = {
        "model": "random LlamaForCausalLM, Qwen2.5-0.5B shape, float32",
        "device": "cpu",
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "input_len": args.input_len,
        "output_len": args.output_len,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "load_and_compile_seconds": round(load_seconds, 1),
        "levels": levels,
    }
    if args.json:
        print(json.dumps(report))
    else:
        for level in levels:
            print(
                f"c={level['concurrency']:>3}  {level['output_tokens_per_second']:>9.2f} out tok/s"
                f"  {level['total_tokens_per_second']:>9.2f} total tok/s"
                f"  {level['requests_per_second']:>7.3f} req/s"
                f"  TTFT {level['mean_ttft_seconds']:.3f}s  TPOT {level['mean_tpot_seconds']:.3f}s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
