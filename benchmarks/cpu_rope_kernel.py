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
from pathlib import Path

import numpy as np
import tvm
from cpu_kernel_timing import alternating_times, cpu_pool_and_target, write_report
from tvm.relax.frontend.nn.llm.position_embedding import llama_rope_with_position_map

from vllm_tvm.schedules.cpu_rope import rope_cpu

H_Q, H_KV, D, THETA = 14, 2, 64, 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="1,512,2048")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    setup = cpu_pool_and_target()
    target = setup["target"]
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
        calls = {
            name: lambda kernel=kernel, bound=(*inputs, *outputs[name], 1): kernel(*bound)
            for name, kernel in kernels.items()
        }
        raw, medians = alternating_times(calls, args.repeats)
        difference = max(
            float(np.abs(ours.numpy() - theirs.numpy()).max())
            for ours, theirs in zip(outputs["ours"], outputs["tvm"], strict=True)
        )
        print(tokens, json.dumps(medians), difference, flush=True)
        results[str(tokens)] = {
            "median": medians,
            "tvm_over_ours_wall": medians["tvm"]["wall_s"] / medians["ours"]["wall_s"],
            "max_abs_difference_ours_vs_tvm": difference,
            "raw": raw,
            "load_average_after": os.getloadavg(),
        }
    shape = {"query_heads": H_Q, "kv_heads": H_KV, "head_dim": D, "theta": THETA}
    write_report(args.out, __doc__, setup, {"shape": shape}, results)


if __name__ == "__main__":
    main()
