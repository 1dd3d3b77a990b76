"""SmolLM2-135M-Instruct on the CPU, three ways: fp32, our group quantization (q4_0, q4_1) of
that fp32, and the GGUF Q4_1 file kept quantized: weight bytes, decode tok/s, perplexity.

Why: the embedded default model is a Q4_1 GGUF and no float SmolLM2 checkpoint is
available offline, so the fp32 source here is the Q4_1 GGUF dequantized (by transformers'
GGUF loader) and saved as an HF safetensors directory. Re-quantizing it with q4_1 is a
best case for q4_1: its weights already lie on a Q4_1 grid of the same group size. Every
variant is measured the same way in one process:

- weight bytes: the artifact's parameters (manifest shapes x dtype sizes) on the device;
- decode tok/s: batch 1, (N - 1) / (t(N out) - t(1 out)) per round, the variants taking
  turns each round (the box is shared: load average recorded before and after), median
  over rounds; CPU seconds per decoded token from the process CPU time the same way;
- perplexity: exp(mean negative log-likelihood) of each token of benchmarks/texts/
  river_town.txt (a paragraph written for this benchmark) given the ones before it, from
  the runner's fp32 prefill logits at every position, one forward over the whole text.

usage: python benchmarks/quant_smollm2.py --fp32-dir /tmp/smollm2-fp32 --out FILE.json
           [--rounds 5] [--output-len 32]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from vllm_tvm.benchmarking.report import host, versions
from vllm_tvm.checkpoints.default_model import default_model_path
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

TEXT = Path(__file__).parent / "texts" / "river_town.txt"
PROMPT_TOKENS = 16
MAX_MODEL_LEN = 1024


def write_fp32_checkpoint(gguf: Path, dest: Path) -> None:
    """The GGUF's weights dequantized to fp32 by transformers, saved as safetensors with the
    config (architecture named, no quantization) and the tokenizer."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    dest.mkdir(parents=True, exist_ok=True)
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k not in tied}
    save_file(state, dest / "model.safetensors", metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = ["LlamaForCausalLM"]
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(dest)


def weight_bytes(llm: LLM) -> int:
    """Bytes of the artifact's parameters as the device holds them."""
    return sum(
        int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in llm.runner.manifest.params
    )


def perplexity(llm: LLM, ids: list[int]) -> float:
    """exp of the mean NLL of ids[1:], each given the ids before it (one prefill)."""
    llm.runner.kv_cache.add_sequence(99)
    try:
        logits = llm.runner.prefill([99], [ids], logit_positions=range(len(ids) - 1))
    finally:
        llm.runner.kv_cache.remove_sequence(99)
    logits = np.asarray(logits, dtype=np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(logits - top).sum(axis=-1))
    nll = log_z - logits[np.arange(len(ids) - 1), ids[1:]]
    return float(np.exp(nll.mean()))


def timed_generate(llm: LLM, prompt: list[int], output_len: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one greedy batch-1 generate call."""
    llm.reset_prefix_cache()
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    wall, cpu = time.perf_counter(), time.process_time()
    llm.generate([prompt], params)
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(variants: dict[str, LLM], ids: list[int], rounds: int, output_len: int) -> dict:
    prompt = ids[:PROMPT_TOKENS]
    for llm in variants.values():  # warm-up: both row counts, untimed
        timed_generate(llm, prompt, 1)
        timed_generate(llm, prompt, output_len)
    raw: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, llm in variants.items():
            wall_1, cpu_1 = timed_generate(llm, prompt, 1)
            wall_n, cpu_n = timed_generate(llm, prompt, output_len)
            raw[name].append({"wall_1": wall_1, "cpu_1": cpu_1, "wall_n": wall_n, "cpu_n": cpu_n})
    results = {}
    for name, runs in raw.items():
        steps = output_len - 1
        results[name] = {
            "decode_tok_s": statistics.median(steps / (r["wall_n"] - r["wall_1"]) for r in runs),
            "cpu_s_per_token": statistics.median((r["cpu_n"] - r["cpu_1"]) / steps for r in runs),
            "raw": runs,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fp32-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output-len", type=int, default=32)
    args = parser.parse_args()
    gguf = default_model_path()
    if not (args.fp32_dir / "model.safetensors").exists():
        write_fp32_checkpoint(gguf, args.fp32_dir)
    sources = {
        "fp32 (Q4_1 GGUF dequantized)": (args.fp32_dir, None),
        "q4_0 (ours, of that fp32)": (args.fp32_dir, "q4_0"),
        "q4_1 (ours, of that fp32)": (args.fp32_dir, "q4_1"),
        "GGUF Q4_1 native": (gguf, None),
    }
    variants = {
        name: LLM(
            model,
            device="cpu",
            quantization=quantization,
            max_model_len=MAX_MODEL_LEN,
            show_progress=False,
        )
        for name, (model, quantization) in sources.items()
    }
    texts = {name: llm.tokenizer.encode(TEXT.read_text()) for name, llm in variants.items()}
    ids = next(iter(texts.values()))
    if any(other != ids for other in texts.values()):
        raise SystemExit("the variants' tokenizers disagree on the text")
    load_before = os.getloadavg()
    timing = measure(variants, ids, args.rounds, args.output_len)
    load_after = os.getloadavg()
    report: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "definitions": __doc__.split("\n\n")[2],
        "conditions": {
            "device": "cpu",
            "dtype": "float32",
            "batch": 1,
            "prompt_tokens": PROMPT_TOKENS,
            "output_len": args.output_len,
            "rounds": args.rounds,
            "text": str(TEXT.relative_to(Path(__file__).parent.parent)),
            "text_tokens": len(ids),
            "load_average_before": load_before,
            "load_average_after": load_after,
            "fp32_source": "the Q4_1 GGUF dequantized by transformers",
            "host": host(),
            "versions": versions(),
        },
        "variants": {
            name: {
                "compile_seconds": llm.runner.manifest.compile_seconds,
                "weight_formats": sorted({p.format for p in llm.runner.manifest.params}),
                "weight_bytes": weight_bytes(llm),
                "perplexity": perplexity(llm, ids),
                **timing[name],
            }
            for name, llm in variants.items()
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, row in report["variants"].items():
        print(
            f"{name:32s} {row['weight_bytes'] / 2**20:8.1f} MiB  ppl {row['perplexity']:8.3f}  "
            f"{row['decode_tok_s']:7.1f} tok/s  {row['cpu_s_per_token'] * 1e3:6.1f} ms CPU/tok"
        )


if __name__ == "__main__":
    main()
