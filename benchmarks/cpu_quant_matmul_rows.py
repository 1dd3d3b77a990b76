"""The quantized NT matmul over several token rows (speculative verify, prefill) in isolation,
register-block variants interleaved, timed in CPU seconds, against batch-1 decode's GEMV.

Why: a verify forward of k drafts runs every projection over k + 1 token rows with a
symbolic row count; when each token row costs half a decode step, speculation cannot pay.
Here each variant of schedules/cpu_quant_matmul.py's several-row register block (token rows
x output features that advance together over k) is compiled for this machine for every
projection shape of SmolLM2-135M (Q4_1) with a symbolic row count, run on the same random
planes at each row count, and timed in rounds that alternate the variants (A B, B A, ...):
per call, this process's CPU time (every worker of TVM's pool counts) and the wall time.
`decode_us` is the single-row product compiled with its static row count (the path batch-1
decode takes), timed in the same rounds. Outputs are compared with the first variant's
(`bit_identical`: same summation order gives the same fp32 bits).

usage: python3 benchmarks/cpu_quant_matmul_rows.py [--rounds 5] [--work 200] [--threads 1]
           [--rows 1,2,5,9,16,64,512] [--out benchmarks/results/X.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from cpu_peers import machine, versions
from cpu_quant_gemv import arguments, build, outputs_of, timed

# (format, out features, in features): SmolLM2-135M's quantized projections.
SHAPES = (
    ("q4_1", 960, 576),  # fused q/k/v
    ("q4_1", 576, 576),  # o_proj
    ("q4_1", 3072, 576),  # fused gate/up
    ("q4_1", 576, 1536),  # down_proj
)


def variants() -> dict[str, Any]:
    from vllm_tvm.compiler.targets import resolve_target
    from vllm_tvm.schedules.cpu_quant_matmul import QuantMatmulShape, shape_for

    default = shape_for(resolve_target("llvm").make_target(), packed=True)
    blocks = {"per_row": (1, 1), "tokens2_features4": (2, 4), "tokens3_features4": (3, 4)}
    blocks |= {"tokens4_features2": (4, 2), "tokens5_features2": (5, 2)}
    return {
        name: QuantMatmulShape(default.vector, default.row_block, tokens, features)
        for name, (tokens, features) in blocks.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=int, default=200, help="token rows per timing")
    parser.add_argument("--threads", type=int, default=1, help="TVM worker pool size")
    parser.add_argument("--rows", default="1,2,5,9,16,64,512")
    parser.add_argument("--variants", default=None, help="comma-separated subset")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    chosen = variants()
    if args.variants:
        chosen = {name: chosen[name] for name in args.variants.split(",")}
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    for fmt_name, out_features, in_features in SHAPES:
        key = f"{fmt_name}_{out_features}x{in_features}"
        decode = build(fmt_name, out_features, in_features, None)
        decode_inputs = arguments(fmt_name, out_features, in_features, seed=0)
        kernels = {
            n: build(fmt_name, out_features, in_features, s, rows=None) for n, s in chosen.items()
        }
        results[key] = {}
        for rows in (int(r) for r in args.rows.split(",")):
            inputs = arguments(fmt_name, out_features, in_features, seed=0, rows=rows)
            outputs = outputs_of(kernels, inputs)
            reference = outputs[next(iter(outputs))]
            scale = float(np.abs(reference).max())
            calls = max(2, args.work // rows)
            raw: dict[str, list[tuple[float, float]]] = {name: [] for name in kernels}
            raw_decode = []
            for index in range(args.rounds):
                order = list(kernels) if index % 2 == 0 else list(reversed(kernels))
                for name in order:
                    raw[name].append(timed(kernels[name], inputs, calls))
                raw_decode.append(timed(decode, decode_inputs, args.work))
            decode_us = statistics.median(c for c, _ in raw_decode) * 1e6
            entry: dict[str, Any] = {"decode_us": decode_us, "raw_decode_cpu_wall_s": raw_decode}
            for name in kernels:
                cpu_us = statistics.median(c for c, _ in raw[name]) * 1e6
                entry[name] = {
                    "cpu_us": cpu_us,
                    "wall_us": statistics.median(w for _, w in raw[name]) * 1e6,
                    "decode_steps": cpu_us / decode_us,
                    "bit_identical": bool(np.array_equal(outputs[name], reference)),
                    "max_rel_diff": float(np.abs(outputs[name] - reference).max()) / scale,
                    "raw_cpu_wall_s": raw[name],
                }
            results[key][str(rows)] = entry
            steps = {n: round(entry[n]["decode_steps"], 2) for n in kernels}
            print(key, rows, f"decode {decode_us:.1f} us", "decode steps", steps, flush=True)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "settings": vars(args) | {"out": str(args.out)},
        "variants": {name: vars(shape) for name, shape in chosen.items()},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "results": results,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
