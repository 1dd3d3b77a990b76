"""The quantized single-row NT matmul (batch-1 decode's GEMV) in isolation, schedule variants
interleaved, timed in CPU seconds.

Why: a decode step of the default model is ≈ 80 % of these products (benchmarks/
cpu_decode_profile.py), and on these shared 2-core machines a whole-model figure moves with
the load. Here each variant of schedules/cpu_quant_matmul.py's register-level choices is
compiled for this machine for every GEMV shape of SmolLM2-135M (Q4_1 projections, the Q8_0
tied head), run on the same random planes, and timed in rounds that alternate the variants
(A B, B A, ...): per call, this process's CPU time (every worker of TVM's pool counts) and
the wall time. The variants' outputs are compared against each other (fp32, sums reordered:
relative error ≤ 1e-5).

usage: python3 benchmarks/cpu_quant_gemv.py [--rounds 5] [--calls 200] [--threads 1]
           [--out benchmarks/results/X.json]
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
from cpu_peers import machine, versions

# (format, out features, in features): SmolLM2-135M's batch-1 decode products.
SHAPES = (
    ("q4_1", 960, 576),  # fused q/k/v
    ("q4_1", 576, 576),  # o_proj (+ residual in the model)
    ("q4_1", 3072, 576),  # fused gate/up
    ("q4_1", 576, 1536),  # down_proj
    ("q8_0", 49152, 576),  # tied head
)


def variants() -> dict[str, Any]:
    from vllm_tvm.schedules.cpu_quant_matmul import VECTOR, WIDE_VECTOR, QuantMatmulShape

    return {
        "avx2_rows1": QuantMatmulShape(vector=VECTOR, row_block=1),
        "avx512_rows1": QuantMatmulShape(vector=WIDE_VECTOR, row_block=1),
        "avx512_rows2": QuantMatmulShape(vector=WIDE_VECTOR, row_block=2),
        "avx512_rows4": QuantMatmulShape(vector=WIDE_VECTOR, row_block=4),
    }


def build(
    fmt_name: str, out_features: int, in_features: int, shape: Any, rows: int | None = 1
) -> Any:
    """The compiled product for this machine, scheduled with `shape`: of one token row, or
    of any number of them (`rows` None: a symbolic row count, as prefill and verify run)."""
    import tvm
    from tvm import te, tirx
    from tvm.s_tir import dlight as dl

    from vllm_tvm.checkpoints.weight_formats import quant_format
    from vllm_tvm.compiler.targets import resolve_target
    from vllm_tvm.model_defs.layers import _nt_matmul
    from vllm_tvm.model_defs.quant_linear import QuantWeight
    from vllm_tvm.schedules.cpu_quant_matmul import CPUQuantNTMatmul

    fmt = quant_format(fmt_name)
    weight = QuantWeight(fmt, (out_features, in_features))
    row_count = tirx.Var("seq_len", "int64") if rows is None else rows
    x = te.placeholder((1, row_count, in_features), "float32", name="x")
    planes = [
        te.placeholder(fmt.plane_shape(p, (out_features, in_features)), p.dtype, name=p.name)
        for p in fmt.planes
    ]
    y = _nt_matmul(x, weight._dequantize(planes), "float32")
    func = te.create_prim_func([x, *planes, y]).with_attr("global_symbol", "gemv")
    target = resolve_target("llvm").make_target()
    with target:
        mod = dl.ApplyDefaultSchedule(CPUQuantNTMatmul(shape))(tvm.IRModule({"gemv": func}))
    return tvm.compile(mod, target=target)["gemv"]


def arguments(
    fmt_name: str, out_features: int, in_features: int, seed: int, rows: int = 1
) -> list[Any]:
    """Random activations and planes (scales drawn small, so sums stay well scaled)."""
    import tvm

    from vllm_tvm.checkpoints.weight_formats import quant_format

    fmt = quant_format(fmt_name)
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((1, rows, in_features), dtype=np.float32)]
    for plane in fmt.planes:
        shape = fmt.plane_shape(plane, (out_features, in_features))
        if plane.dtype == "uint32":
            arrays.append(rng.integers(0, 1 << 32, size=shape, dtype=np.uint32))
        elif plane.dtype == "int8":
            arrays.append(rng.integers(-128, 128, size=shape, dtype=np.int8))
        elif plane.dtype == "uint8":  # 6-bit K-quant scales and mins, zero points, exponents
            arrays.append(rng.integers(0, 64, size=shape, dtype=np.uint8))
        else:
            arrays.append((rng.random(shape) * 0.01).astype(plane.dtype))
    arrays.append(np.zeros((1, rows, out_features), np.float32))
    return [tvm.runtime.tensor(a, tvm.cpu()) for a in arrays]


def timed(kernel: Any, args: list[Any], calls: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per call over `calls` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        kernel(*args)
    return (time.process_time() - cpu) / calls, (time.perf_counter() - wall) / calls


def outputs_of(kernels: dict[str, Any], inputs: list[Any]) -> dict[str, np.ndarray]:
    """Each kernel's output (the last of `inputs`) after one call on `inputs`."""
    outputs = {}
    for name, kernel in kernels.items():
        kernel(*inputs)
        outputs[name] = inputs[-1].numpy().copy()
    return outputs


def interleaved_rounds(
    kernels: dict[str, Any], inputs: list[Any], calls: int, rounds: int
) -> dict[str, list[tuple[float, float]]]:
    """Each kernel's (CPU, wall) seconds per call in `rounds` rounds that alternate the
    kernels' order (A B, B A, ...), so that a drift in the machine's load hits each alike."""
    raw: dict[str, list[tuple[float, float]]] = {name: [] for name in kernels}
    for index in range(rounds):
        order = list(kernels) if index % 2 == 0 else list(reversed(kernels))
        for name in order:
            raw[name].append(timed(kernels[name], inputs, calls))
    return raw


def write_report(
    args: argparse.Namespace, load_before: tuple[float, ...], **fields: Any
) -> dict[str, Any]:
    """The run's JSON (date, machine, versions, settings, load averages, `fields`) to
    `args.out`, where given (paths and other values as their text); the report."""
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "settings": vars(args) | {"out": str(args.out)},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        **fields,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="calls per timing")
    parser.add_argument("--threads", type=int, default=1, help="TVM worker pool size")
    parser.add_argument("--variants", default=None, help="comma-separated subset")
    parser.add_argument("--formats", default=None, help="comma-separated subset, e.g. q8_0")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    chosen = variants()
    if args.variants:
        chosen = {name: chosen[name] for name in args.variants.split(",")}
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    formats = args.formats.split(",") if args.formats else None
    for fmt_name, out_features, in_features in SHAPES:
        if formats is not None and fmt_name not in formats:
            continue
        key = f"{fmt_name}_{out_features}x{in_features}"
        inputs = arguments(fmt_name, out_features, in_features, seed=0)
        kernels = {n: build(fmt_name, out_features, in_features, s) for n, s in chosen.items()}
        outputs = outputs_of(kernels, inputs)
        reference = outputs[next(iter(outputs))]
        scale = float(np.abs(reference).max())
        raw = interleaved_rounds(kernels, inputs, args.calls, args.rounds)
        results[key] = {
            name: {
                "cpu_us": statistics.median(c for c, _ in raw[name]) * 1e6,
                "wall_us": statistics.median(w for _, w in raw[name]) * 1e6,
                "max_rel_diff": float(np.abs(outputs[name] - reference).max()) / scale,
                "raw_cpu_wall_s": raw[name],
            }
            for name in kernels
        }
        first = next(iter(kernels))
        line = {
            n: round(results[key][first]["cpu_us"] / r["cpu_us"], 2)
            for n, r in results[key].items()
        }
        print(key, {n: round(r["cpu_us"], 1) for n, r in results[key].items()}, "speedup", line)
    variants_used = {name: vars(shape) for name, shape in chosen.items()}
    write_report(args, load_before, variants=variants_used, results=results)


if __name__ == "__main__":
    main()
