"""CPU attention: our prefill, decode and paged-prefill kernels vs TVM 0.27's, one layer, raw JSON.

Why: prefill of long prompts grew super-linearly, and a profile of a 1,000-token prefill of
SmolLM2-135M put about 30% of its samples in TVM's serial ragged-prefill kernel; its serial
paged-decode kernel was 5% of a decode step at a 64-token context and grows with the
context, and its serial paged-prefill kernel made a 5-token speculative verify cost 5.4 decode
steps. This times schedules/cpu_attention.py's prefill kernel,
schedules/cpu_decode_attention.py's decode kernel and schedules/cpu_paged_prefill_attention.py's
paged-prefill kernel against TVM's on one layer of that shape (9 query heads, 3 key/value heads,
head dimension 64, fp32; prefill: causal, one sequence; decode: one sequence, 16-token pages;
paged prefill: a chunk of rows over one sequence's cached pages), each length in turn, ours
and TVM's alternating, with TVM's worker pool sized as the model runner sizes it, all compiled
for the models' CPU target (this machine's processor, compiler/targets.py). Per call: wall
seconds and this process's CPU seconds (both workers), and ours per (query, key, head) pair
scored. TVM's prefill kernel takes minutes from a few thousand tokens: above
--reference-up-to only ours is timed.

usage: python3 benchmarks/cpu_attention_kernel.py [--lengths 250,1000,2000,8000]
           [--contexts 64,500,2000,8000] [--chunks 1,5,9] [--chunk-context 300]
           [--repeats 3] [--reference-up-to 2000]
           --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tvm
from cpu_kernel_timing import alternating_times, cpu_pool_and_target, write_report
from tvm.relax.frontend.nn.llm._decode_kernels import _attention_decode_cpu
from tvm.relax.frontend.nn.llm._prefill_kernels import (
    _attention_prefill_cpu,
    _attention_prefill_ragged_cpu,
)

from vllm_tvm.schedules.cpu_attention import ragged_prefill_cpu
from vllm_tvm.schedules.cpu_decode_attention import paged_decode_cpu
from vllm_tvm.schedules.cpu_paged_prefill_attention import paged_prefill_cpu

H_KV, H_Q, D = 3, 9, 64
PAGE = 16
SM_SCALE = D**-0.5


def _timed(kernels: dict[str, Callable[[], None]], repeats: int, pairs: float) -> dict:
    """Each kernel once untimed, then `repeats` rounds of all of them in turn: medians, ours
    per scored pair, TVM's over ours, the raw seconds and the load afterwards."""
    raw, medians = alternating_times(kernels, repeats)
    result = {"median": medians, "ours_cpu_ns_per_pair": medians["ours"]["cpu_s"] / pairs * 1e9}
    if "tvm" in medians:
        for measure in ("wall", "cpu"):
            ratio = medians["tvm"][f"{measure}_s"] / medians["ours"][f"{measure}_s"]
            result[f"tvm_over_ours_{measure}"] = ratio
    print(json.dumps(medians), flush=True)
    return {**result, "raw": raw, "load_average_after": os.getloadavg()}


def _prefill(compiled: dict, length: int, rng: np.random.Generator) -> dict[str, Callable]:
    indptr = np.array([0, length], np.int32)
    arrays = [
        rng.standard_normal((length, H_Q, D)).astype(np.float32),
        indptr,
        rng.standard_normal((length, H_KV, D)).astype(np.float32),
        rng.standard_normal((length, H_KV, D)).astype(np.float32),
        indptr,
        np.zeros(length, np.int32),
        np.zeros(1, np.int32),
        np.zeros((length, H_Q, D), np.float32),
        np.zeros((length, H_Q), np.float32),
    ]
    inputs = [tvm.runtime.tensor(array, tvm.cpu()) for array in arrays]
    return {k: lambda f=f: f(*inputs, 1, 0, 1.0, 1e4, SM_SCALE) for k, f in compiled.items()}


def _decode(compiled: dict, context: int, rng: np.random.Generator) -> dict[str, Callable]:
    pages = -(-context // PAGE)
    arrays = [
        rng.standard_normal((1, H_Q, D)).astype(np.float32),
        rng.standard_normal((pages, 2, H_KV, PAGE, D)).astype(np.float32),
        np.array([0, pages], np.int32),
        rng.permutation(pages).astype(np.int32),
        np.array([context - (pages - 1) * PAGE], np.int32),
        np.zeros(1, np.int32),
        np.zeros(1, np.int32),
        np.zeros((1, H_Q, D), np.float32),
        np.zeros((1, H_Q), np.float32),
    ]
    inputs = [tvm.runtime.tensor(array, tvm.cpu()) for array in arrays]
    return {k: lambda f=f: f(*inputs, 0, 1.0, 1e4, SM_SCALE) for k, f in compiled.items()}


def _paged_prefill(
    compiled: dict, rows: int, context: int, rng: np.random.Generator
) -> dict[str, Callable]:
    pages = -(-context // PAGE)
    arrays = [
        rng.standard_normal((rows, H_Q, D)).astype(np.float32),
        np.array([0, rows], np.int32),
        rng.standard_normal((pages, 2, H_KV, PAGE, D)).astype(np.float32),
        np.array([0, pages], np.int32),
        rng.permutation(pages).astype(np.int32),
        np.array([context - (pages - 1) * PAGE], np.int32),
        np.zeros(1, np.int32),
        np.zeros(rows, np.int32),
        np.zeros((rows, H_Q, D), np.float32),
        np.zeros((rows, H_Q), np.float32),
    ]
    inputs = [tvm.runtime.tensor(array, tvm.cpu()) for array in arrays]
    return {k: lambda f=f: f(*inputs, 0, 0, 1.0, 1e4, SM_SCALE) for k, f in compiled.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", default="250,1000,2000,8000")
    parser.add_argument("--contexts", default="64,500,2000,8000")
    parser.add_argument("--chunks", default="1,5,9", help="rows of a paged-prefill chunk")
    parser.add_argument("--chunk-context", type=int, default=300, help="keys cached before it")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-up-to", type=int, default=2000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    setup = cpu_pool_and_target()
    target = setup["target"]
    prefill = {
        "ours": tvm.compile(ragged_prefill_cpu(H_KV, H_Q, D, "float32"), target=target),
        "tvm": tvm.compile(
            _attention_prefill_ragged_cpu(H_KV, H_Q, D, D, "float32", {}), target=target
        ),
    }
    decode = {
        "ours": tvm.compile(paged_decode_cpu(H_KV, H_Q, D, "float32", PAGE), target=target),
        "tvm": tvm.compile(_attention_decode_cpu(H_KV, H_Q, D, "float32", False, {}), target),
    }
    paged_prefill = {
        "ours": tvm.compile(paged_prefill_cpu(H_KV, H_Q, D, "float32", PAGE), target=target),
        "tvm": tvm.compile(_attention_prefill_cpu(H_KV, H_Q, D, "float32", False, {}), target),
    }
    rng = np.random.default_rng(0)
    results: dict = {"prefill": {}, "decode": {}, "paged_prefill": {}}
    for length in [int(n) for n in args.lengths.split(",")]:
        print("prefill", length, end=" ")
        kernels = {
            k: f for k, f in prefill.items() if k == "ours" or length <= args.reference_up_to
        }
        pairs = length * (length + 1) / 2 * H_Q  # (query, key, head) a causal prompt scores
        results["prefill"][str(length)] = _timed(
            _prefill(kernels, length, rng), args.repeats, pairs
        )
    for context in [int(n) for n in args.contexts.split(",")]:
        print("decode", context, end=" ")
        calls = _decode(decode, context, rng)
        results["decode"][str(context)] = _timed(calls, args.repeats, context * H_Q)
    for rows in [int(n) for n in args.chunks.split(",")]:
        print("paged prefill", rows, "rows over", args.chunk_context, end=" ")
        calls = _paged_prefill(paged_prefill, rows, args.chunk_context, rng)
        pairs = rows * args.chunk_context * H_Q  # (query, key, head) without the causal flag
        results["paged_prefill"][f"{rows}x{args.chunk_context}"] = _timed(
            calls, args.repeats, pairs
        )
    shape = {"query_heads": H_Q, "kv_heads": H_KV, "head_dim": D, "dtype": "float32"}
    write_report(args.out, __doc__, setup, {"shape": shape}, results)


if __name__ == "__main__":
    main()
