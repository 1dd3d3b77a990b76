"""How much of our CPU time goes to matmuls, to attention and to the rest, where we trail.

Why: where a CPU figure still trails llama.cpp, the next step depends on which kind of work
holds the time: the matmuls (schedules/cpu_quant_matmul.py and the float GEMMs), attention
(the KV cache's attention kernels, RoPE and KV append included, schedules/cpu_attention.py)
or everything else (norms, activations, embedding, the VM's own builtins). One command gives
that split for the two cases the comparison is furthest behind on: a 2,048-token prefill of
the default model and a batch-1 decode step of the 0.5B model (cpu_peer_models.py). Each VM
call is timed in this process's CPU time (both pool workers) by the Relax VM's instrument
hook; the hook's own Python cost falls on every call alike, which inflates `rest` (many
small builtin calls) most in the decode case: read the split as an upper bound for `rest`.

usage: python3 benchmarks/cpu_profile_shares.py [--prefill 2048] [--kind Q4_K_M] [--steps 32]
           [--repeats 2] [--quick] [--out benchmarks/results/X.json]
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from cpu_decode_profile import instrumented_calls, kernel_shares, per_symbol, runner_for
from cpu_peer_models import QUANT_TYPES, prepare_models
from cpu_peers import DEFAULT_CACHE, build_llamacpp, default_gguf, machine, versions

CATEGORIES = ("matmul", "attention", "rest")
_ATTENTION_MARKS = ("attention", "kv_cache", "rope", "batch_prefill", "batch_decode")


def category(symbol: str) -> str:
    """The category of a VM call symbol: `matmul` for compiled matmuls (fused or not),
    `attention` for the KV cache's attention builtins and kernels, `rest` otherwise."""
    lowered = symbol.lower()
    if any(mark in lowered for mark in _ATTENTION_MARKS):
        return "attention"
    if "matmul" in lowered or "gemm" in lowered or "gemv" in lowered:
        return "matmul"
    return "rest"


def category_shares(symbols: dict[str, Any]) -> dict[str, Any]:
    """Per category: CPU ms per unit of work, share of the whole, and its symbols."""
    whole = sum(entry["cpu_ms"] for entry in symbols.values())
    split: dict[str, Any] = {
        name: {"cpu_ms": 0.0, "share": 0.0, "symbols": []} for name in CATEGORIES
    }
    for symbol, entry in symbols.items():
        bucket = split[category(symbol)]
        bucket["cpu_ms"] += entry["cpu_ms"]
        bucket["symbols"].append(symbol)
    for bucket in split.values():
        bucket["share"] = bucket["cpu_ms"] / whole if whole else 0.0
    return split


def prefill_case(gguf: Path, length: int, repeats: int) -> dict[str, Any]:
    """One `length`-token prefill into an empty cache, `repeats` times after one untimed."""
    runner = runner_for(gguf, length)
    prompt = np.random.default_rng(0).integers(100, runner.vocab_size, size=length).tolist()
    next_seq = iter(range(1 << 30))

    def prefill() -> None:
        seq = next(next_seq)
        runner.kv_cache.add_sequence(seq)
        runner.prefill_logits([seq], [prompt]).argmax()
        runner.kv_cache.remove_sequence(seq)

    prefill()
    totals = instrumented_calls(runner, lambda: [prefill() for _ in range(repeats)])
    symbols = per_symbol(totals, repeats)
    return {"threads": runner.cpu_threads, "categories": category_shares(symbols)} | {
        "per_prefill": symbols
    }


def decode_case(gguf: Path, context: int, steps: int) -> dict[str, Any]:
    """`steps` batch-1 decode steps after a `context`-token prompt (warmed by that prompt)."""
    runner = runner_for(gguf, context + steps + 1)
    prompt = np.random.default_rng(0).integers(100, runner.vocab_size, size=context).tolist()
    kernel_shares(runner, prompt, 2)  # untimed: first calls of the decode kernels
    symbols = kernel_shares(runner, prompt, steps)
    return {"threads": runner.cpu_threads, "categories": category_shares(symbols)} | {
        "per_step": symbols
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefill", type=int, default=2048, help="prompt tokens (default model)")
    parser.add_argument("--kind", default="Q4_K_M", choices=("F16", *QUANT_TYPES))
    parser.add_argument("--context", type=int, default=64, help="prompt before the decode steps")
    parser.add_argument("--steps", type=int, default=32, help="0.5B decode steps profiled")
    parser.add_argument("--repeats", type=int, default=2, help="prefills profiled")
    parser.add_argument("--quick", action="store_true", help="prefill 256, 4 steps, 1 repeat")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.prefill, args.steps, args.repeats = 256, 4, 1
    models = prepare_models(args.cache, build_llamacpp(args.cache), (args.kind,))
    load_before = os.getloadavg()
    cases = {
        f"prefill_{args.prefill}_default_model": prefill_case(
            default_gguf(), args.prefill, args.repeats
        ),
        f"decode_b1_0.5b_{args.kind}": decode_case(models[args.kind], args.context, args.steps),
    }
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "definitions": __doc__.split("\n\nusage:")[0],
        "machine": machine(),
        "versions": versions(),
        "settings": {k: str(v) for k, v in vars(args).items()},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cases": cases,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name, case in cases.items():
        split = case["categories"].items()
        print(name, {k: f"{v['share']:.1%}, {v['cpu_ms']:.1f} ms" for k, v in split})


if __name__ == "__main__":
    main()
