"""K-quant decode GEMVs at Llama-3.2-1B widths: the int8 path against the fused float kernel.

Why: a Q4_K_M file is mostly Q4_K and Q6_K, and `--cpu-int8-activations` now routes those
products to Q8_K activations and integer dot products (schedules/cpu_int8_kquant_dot.py).
Here each product of one token row (batch-1 decode) is compiled for this machine three
ways: the float fused kernel (model_defs/quant_linear.py scheduled by
schedules/cpu_quant_matmul.py, what `off` runs), and the int8 path with VNNI and with AVX2
(the activations' quantization included, as the model runs it), on the same random planes.
They are timed in rounds that alternate the variants (A B C, C B A, ...): per call, this
process's CPU time (every worker of TVM's pool counts) and the wall time; the load average
is recorded before and after. The int8 outputs are compared with the float one (they differ
by the activations' rounding: relative RMS about 1e-2).

usage: python3 benchmarks/cpu_int8_kquant_gemv.py [--rounds 5] [--calls 50] [--threads 1]
           [--formats q4_k,q6_k] [--out benchmarks/results/X.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from cpu_quant_gemv import arguments, build, timed, write_report

# (out features, in features): Llama-3.2-1B's decode products (hidden 2048, MLP 8192).
SHAPES = ((2048, 2048), (8192, 2048), (2048, 8192))
FORMATS = ("q4_k", "q6_k", "q5_k", "q3_k", "q2_k")


class Int8Product:
    """The Q8_K quantization of one row and the integer product, compiled for `isa`."""

    def __init__(self, fmt_name: str, out_features: int, in_features: int, isa: str) -> None:
        import tvm
        from tvm.target import Target

        from vllm_tvm.compiler.targets import resolve_target
        from vllm_tvm.schedules.cpu_int8_dot import VNNI
        from vllm_tvm.schedules.cpu_int8_kquant_dot import (
            SUPER_BLOCK,
            int8_kquant_gemv,
            quantize_activations_q8_k,
        )

        native = resolve_target("llvm").make_target()
        target = native if isa == VNNI else Target({"kind": "llvm", "mcpu": "haswell"})
        quantize = quantize_activations_q8_k(1, in_features)
        product = int8_kquant_gemv(fmt_name, 1, out_features, in_features, isa)
        self.quantize = tvm.compile(tvm.IRModule({"main": quantize}), target=target)["main"]
        self.product = tvm.compile(tvm.IRModule({"main": product}), target=target)["main"]
        self.activations = [
            tvm.runtime.tensor(np.zeros(shape, dtype), tvm.cpu())
            for shape, dtype in (
                ((1, in_features), "int8"),
                ((1, in_features // SUPER_BLOCK), "float32"),
                ((1, in_features // 16), "int16"),
            )
        ]

    def __call__(self, x: Any, *weights_and_out: Any) -> None:
        """x [1, in], the planes, out [1, out]."""
        self.quantize(x, *self.activations)
        self.product(*self.activations, *weights_and_out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50, help="calls per timing")
    parser.add_argument("--threads", type=int, default=1, help="TVM worker pool size")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import tvm

    from vllm_tvm.compiler.targets import resolve_target
    from vllm_tvm.schedules.cpu_int8_dot import AVX2, VNNI, int8_dot_isa

    native_isa = int8_dot_isa(resolve_target("llvm").make_target())
    isas = [VNNI, AVX2] if native_isa == VNNI else [AVX2]
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    for fmt_name in args.formats.split(","):
        for out_features, in_features in SHAPES:
            key = f"{fmt_name}_{out_features}x{in_features}"
            inputs = arguments(fmt_name, out_features, in_features, seed=0)
            x, *weights, out = inputs
            flat = [tvm.runtime.tensor(t.numpy().reshape(1, -1), tvm.cpu()) for t in (x, out)]
            kernels: dict[str, Any] = {
                "float": (build(fmt_name, out_features, in_features, None), inputs)
            }
            for isa in isas:
                product = Int8Product(fmt_name, out_features, in_features, isa)
                kernels[f"int8_{isa}"] = (product, [flat[0], *weights, flat[1]])
            outputs = {}
            for name, (kernel, kernel_inputs) in kernels.items():
                kernel(*kernel_inputs)
                outputs[name] = kernel_inputs[-1].numpy().reshape(-1).copy()
            reference = outputs["float"]
            rms = float(np.sqrt((reference**2).mean()))
            raw: dict[str, list[tuple[float, float]]] = {name: [] for name in kernels}
            for index in range(args.rounds):
                order = list(kernels) if index % 2 == 0 else list(reversed(kernels))
                for name in order:
                    raw[name].append(timed(*kernels[name], args.calls))
            results[key] = {
                name: {
                    "cpu_us": statistics.median(c for c, _ in raw[name]) * 1e6,
                    "wall_us": statistics.median(w for _, w in raw[name]) * 1e6,
                    "relative_rms_vs_float": float(
                        np.sqrt(((outputs[name] - reference) ** 2).mean()) / rms
                    ),
                    "raw_cpu_wall_s": raw[name],
                }
                for name in kernels
            }
            speedup = {
                n: round(results[key]["float"]["cpu_us"] / r["cpu_us"], 2)
                for n, r in results[key].items()
            }
            line = {n: round(r["cpu_us"], 1) for n, r in results[key].items()}
            print(key, line, "speedup", speedup, "load", os.getloadavg()[0], flush=True)
    write_report(args, load_before, results=results)


if __name__ == "__main__":
    main()
