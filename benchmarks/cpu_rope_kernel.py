"""CPU RoPE split of the KV cache: schedules/cpu_rope.py's kernel vs TVM 0.27's
(`llama_rope_with_position_map`), raw JSON.

Why: TVM's kernel runs on one thread with a scalar `pow`, `cos` and `sin` per element of
every query and key head; at Qwen2.5-0.5B's shape it was about half of what the 512-token
prefill profile counts as attention (benchmarks/results/cpu_prefill_profile_2026-12-04/).
This compiles both kernels for the models' CPU target at that shape (14 query / 2 KV heads
of 64, fp32, RoPE theta 1e6, positions 0..tokens-1) and times them, alternating, for each
token count, with TVM's worker pool sized as the model runner sizes it. Per call: wall and
this process's CPU seconds (both workers); also the largest absolute difference between
the two kernels' q and k.

usage: python3 benchmarks/cpu_rope_kernel.py [--tokens 1,512,2048] [--repeats 20]
           --out benchmarks/results/X.json
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
from tvm.relax.frontend.nn.llm.position_embedding import llama_rope_with_position_map

from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.runtime.model.cpu_threads import (
    configure_cpu_pool,
    plan_cpu_threads,
    prepare_cpu_pool,
)
from vllm_tvm.schedules.cpu_rope import rope_cpu

H_Q, H_KV, D, THETA = 14, 2, 64, 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="1,512,2048")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    load_before = os.getloadavg()
    plan = plan_cpu_threads()
    prepare_cpu_pool(plan)
    workers = configure_cpu_pool(tvm, plan)
    target = resolve_target("llvm").make_target()
    factory_args = (THETA, 1.0, D, H_Q, H_KV, "float32", {}, None)
    kernels = {
        name: tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target)
        for name, f in (
            ("tvm", llama_rope_with_position_map(*factory_args)),
            ("ours", rope_cpu(*factory_args)),
        )
    }
    rng = np.random.default_rng(0)
    results = {}
    for tokens in [int(n) for n in args.tokens.split(",")]:
        qkv = rng.standard_normal((tokens, H_Q + 2 * H_KV, D)).astype(np.float32)
        inputs = [tvm.runtime.tensor(qkv), tvm.runtime.tensor(np.arange(tokens, dtype=np.int32))]
        outputs = {
            k: [tvm.runtime.empty((tokens, h, D), "float32") for h in (H_Q, H_KV, H_KV)]
            for k in kernels
        }
        raw = {k: {"wall_s": [], "cpu_s": []} for k in kernels}
        for repeat in range(args.repeats + 1):
            for name, kernel in kernels.items():
                wall, cpu = time.perf_counter(), time.process_time()
                kernel(*inputs, *outputs[name], 1)
                if repeat:
                    raw[name]["wall_s"].append(time.perf_counter() - wall)
                    raw[name]["cpu_s"].append(time.process_time() - cpu)
        difference = max(
            float(np.abs(ours.numpy() - theirs.numpy()).max())
            for ours, theirs in zip(outputs["ours"], outputs["tvm"], strict=True)
        )
        medians = {k: {m: statistics.median(v) for m, v in r.items()} for k, r in raw.items()}
        print(tokens, json.dumps(medians), difference, flush=True)
        results[str(tokens)] = {
            "median": medians,
            "tvm_over_ours_wall": medians["tvm"]["wall_s"] / medians["ours"]["wall_s"],
            "max_abs_difference_ours_vs_tvm": difference,
            "raw": raw,
            "load_average_after": os.getloadavg(),
        }
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "definitions": __doc__.split("\n\nusage:")[0],
        "shape": {"query_heads": H_Q, "kv_heads": H_KV, "head_dim": D, "theta": THETA},
        "workers": workers,
        "target": str(target),
        "load_average_before": load_before,
        "machine": machine(),
        "versions": versions(),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
