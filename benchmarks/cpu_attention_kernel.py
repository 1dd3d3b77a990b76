"""Ragged-prefill attention on the CPU: our kernel against TVM 0.27's, one layer, raw JSON.

Why: prefill of long prompts grew super-linearly, and a profile of a 1,000-token prefill of
SmolLM2-135M put about 30% of its samples in TVM's serial ragged-prefill kernel. This times
schedules/cpu_attention.py's kernel and TVM's on one layer of that shape (9 query heads, 3
key/value heads, head dimension 64, fp32, causal, one sequence), each prompt length in turn,
the two kernels alternating, with TVM's worker pool sized as the model runner sizes it, both
compiled for the models' CPU target (this machine's processor, compiler/targets.py). Per
call: wall seconds and this process's CPU seconds (both workers), and ours per (query, key,
head) pair a causal prompt scores. TVM's kernel takes minutes from a few thousand tokens:
above --reference-up-to only ours is timed.

usage: python3 benchmarks/cpu_attention_kernel.py [--lengths 250,1000,2000,8000] [--repeats 3]
           [--reference-up-to 2000] --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import tvm
from cpu_peers import machine, versions
from tvm.relax.frontend.nn.llm._prefill_kernels import _attention_prefill_ragged_cpu

from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.runtime.model.cpu_threads import (
    configure_cpu_pool,
    plan_cpu_threads,
    prepare_cpu_pool,
)
from vllm_tvm.schedules.cpu_attention import ragged_prefill_cpu

H_KV, H_Q, D = 3, 9, 64
SM_SCALE = D**-0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", default="250,1000,2000,8000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-up-to", type=int, default=2000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    load_before = os.getloadavg()
    plan = plan_cpu_threads()
    prepare_cpu_pool(plan)
    workers = configure_cpu_pool(tvm, plan)
    target = resolve_target("llvm").make_target()
    compiled = {
        "ours": tvm.compile(ragged_prefill_cpu(H_KV, H_Q, D, "float32"), target=target),
        "tvm": tvm.compile(
            _attention_prefill_ragged_cpu(H_KV, H_Q, D, D, "float32", {}), target=target
        ),
    }
    device, rng = tvm.cpu(), np.random.default_rng(0)
    results: dict = {}
    for length in [int(n) for n in args.lengths.split(",")]:
        kernels = {
            k: f for k, f in compiled.items() if k == "ours" or length <= args.reference_up_to
        }
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
        inputs = [tvm.runtime.tensor(array, device) for array in arrays]
        raw: dict[str, dict[str, list[float]]] = {k: {"wall_s": [], "cpu_s": []} for k in kernels}
        for repeat in range(args.repeats + 1):  # the first call of each is untimed
            for name, kernel in kernels.items():
                wall, cpu = time.perf_counter(), time.process_time()
                kernel(*inputs, 1, 0, 1.0, 1e4, SM_SCALE)
                if repeat:
                    raw[name]["wall_s"].append(time.perf_counter() - wall)
                    raw[name]["cpu_s"].append(time.process_time() - cpu)
        medians = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in raw.items()}
        pairs = length * (length + 1) / 2 * H_Q  # (query, key, head) pairs a causal prompt scores
        results[str(length)] = {
            "median": medians,
            "ours_cpu_ns_per_pair": medians["ours"]["cpu_s"] / pairs * 1e9,
            "raw": raw,
            "load_average_after": os.getloadavg(),
        }
        if "tvm" in medians:
            results[str(length)]["tvm_over_ours_wall"] = (
                medians["tvm"]["wall_s"] / medians["ours"]["wall_s"]
            )
            results[str(length)]["tvm_over_ours_cpu"] = (
                medians["tvm"]["cpu_s"] / medians["ours"]["cpu_s"]
            )
        print(length, json.dumps(medians), flush=True)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "shape": {"query_heads": H_Q, "kv_heads": H_KV, "head_dim": D, "dtype": "float32"},
        "workers": workers,
        "target": str(target),
        "load_average_before": load_before,
        "machine": machine(),
        "versions": versions(),
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
