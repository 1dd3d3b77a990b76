"""Prefill-sized quantized products: the float path against the int8-activation path.

Why: `--cpu-int8-activations` (compiler/int8_activations.py) quantizes the activations and
multiplies them with integer dot products. For one token row (decode) the product is bound by
the weight stream and the integer kernel wins; for hundreds of rows (prefill) the float path
dequantizes each weight tile once and reuses it across rows from cache, so the question is
whether the integer kernels still pay there. Each variant is compiled for this machine with
a symbolic row count (as a model's prefill runs it) for Qwen2.5-0.5B- and Llama-3.2-1B-like
shapes, run on the same random activations and planes, and timed in rounds that alternate
the variants (A B C, C B A, ...): per call, this process's CPU time (every worker of TVM's
pool counts) and the wall time. The int8 variants' time includes quantizing the activations.

- `float`: schedules/cpu_quant_matmul.py's several-row schedule (dequantized tile, register
  blocks of token rows x features), the path the float build takes.
- `int8_rows`: quantize_activations + int8_gemv (schedules/cpu_int8_dot.py), one output at a
  time.
- `int8_tiled`: quantize_activations + int8_gemm (schedules/cpu_int8_gemm.py), register blocks
  of token rows x output features.

usage: python3 benchmarks/cpu_int8_prefill.py [--rows 512] [--rounds 3] [--calls 2]
           [--formats q8_0,q4_0,q5_0] [--variants float,int8_rows,int8_tiled] [--out X.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from cpu_quant_gemv import arguments, build, interleaved_rounds, outputs_of, write_report

SHAPES = ((4864, 896), (896, 4864), (2048, 2048), (8192, 2048))
"""(out features, in features): Qwen2.5-0.5B's gate/up and down, Llama-3.2-1B's square
projections and its gate/up."""

Kernel = Callable[..., None]


def _compiled(func: Any) -> Kernel:
    import tvm

    from vllm_tvm.compiler.targets import resolve_target

    target = resolve_target("llvm").make_target()
    return tvm.compile(tvm.IRModule({"main": func}), target=target)["main"]


def int8_variant(fmt_name: str, features: int, columns: int, tiled: bool) -> Callable:
    """A function of the float variant's arguments that quantizes the activations and runs
    the integer product (the row count symbolic, as in a model)."""
    import tvm
    from tvm import tirx

    from vllm_tvm.compiler.targets import resolve_target
    from vllm_tvm.schedules.cpu_int8_dot import (
        OFFSET_FORMATS,
        int8_dot_isa,
        int8_gemv,
        quantize_activations,
    )
    from vllm_tvm.schedules.cpu_int8_gemm import int8_gemm

    isa = int8_dot_isa(resolve_target("llvm").make_target())
    rows = tirx.Var("rows", "int64")
    with_sums = fmt_name in OFFSET_FORMATS
    quantize = _compiled(quantize_activations(rows, columns, with_sums))
    product = (int8_gemm if tiled else int8_gemv)(fmt_name, rows, features, columns, isa)
    multiply = _compiled(product)
    scratch: dict[int, list[Any]] = {}

    def run(x: Any, *rest: Any) -> None:
        *planes, out = rest
        count = x.shape[1]
        if count not in scratch:
            blocks = (count, columns // 32)
            arrays = [np.zeros((count, columns), np.int8), np.zeros(blocks, np.float16)]
            arrays += [np.zeros(blocks, np.float16)] if with_sums else []
            scratch[count] = [tvm.runtime.tensor(a, tvm.cpu()) for a in arrays]
        activations = scratch[count]
        quantize(x._create_view((count, columns)), *activations)
        multiply(*activations, *planes, out._create_view((count, features)))

    return run


def variant(name: str, fmt_name: str, features: int, columns: int) -> Kernel:
    """The compiled variant `name` (see the module docstring) of the product."""
    if name == "float":
        return build(fmt_name, features, columns, None, rows=None)
    if name not in ("int8_rows", "int8_tiled"):
        raise ValueError(f"unknown variant {name!r}: float, int8_rows or int8_tiled")
    return int8_variant(fmt_name, features, columns, tiled=name == "int8_tiled")


def measure(
    kernels: dict[str, Kernel], fmt_name: str, features: int, columns: int, rows: int, args: Any
) -> dict[str, Any]:
    """The variants at `rows` token rows, timed in alternating rounds; calls per timing
    scaled so that each timing covers about `args.calls` 512-row products' work."""
    inputs = arguments(fmt_name, features, columns, seed=0, rows=rows)
    outputs = outputs_of(kernels, inputs)
    reference = outputs[next(iter(outputs))]
    scale = float(np.abs(reference).max())
    calls = max(args.calls, args.calls * 512 // rows)
    raw = interleaved_rounds(kernels, inputs, calls, args.rounds)
    macs = rows * features * columns
    return {
        name: {
            "cpu_ms": statistics.median(c for c, _ in raw[name]) * 1e3,
            "min_cpu_ms": min(c for c, _ in raw[name]) * 1e3,
            "wall_ms": statistics.median(w for _, w in raw[name]) * 1e3,
            "gmac_per_cpu_s": macs / statistics.median(c for c, _ in raw[name]) / 1e9,
            "max_rel_diff_vs_first": float(np.abs(outputs[name] - reference).max()) / scale,
            "calls_per_timing": calls,
            "raw_cpu_wall_s": raw[name],
        }
        for name in kernels
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="512", help="comma-separated token row counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2, help="calls per timing")
    parser.add_argument("--threads", type=int, default=1, help="TVM worker pool size")
    parser.add_argument("--formats", default="q8_0,q4_0,q5_0")
    parser.add_argument("--variants", default="float,int8_rows,int8_tiled")
    parser.add_argument("--shapes", default=None, help="e.g. 2048x2048,8192x2048")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    shapes = SHAPES
    if args.shapes:
        shapes = tuple(tuple(int(n) for n in s.split("x")) for s in args.shapes.split(","))
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    for fmt_name in args.formats.split(","):
        for features, columns in shapes:
            key = f"{fmt_name}_{features}x{columns}"
            kernels = {
                name: variant(name, fmt_name, features, columns)
                for name in args.variants.split(",")
            }
            results[key] = {}
            for rows in (int(r) for r in args.rows.split(",")):
                results[key][str(rows)] = measure(kernels, fmt_name, features, columns, rows, args)
                line = {n: round(r["cpu_ms"], 2) for n, r in results[key][str(rows)].items()}
                print(key, rows, "rows, cpu ms", line, "load", os.getloadavg(), flush=True)
    write_report(args, load_before, results=results)


if __name__ == "__main__":
    main()
