"""CPU SwiGLU activation, silu(gate) * up: schedules/cpu_elementwise.py's kernel vs LLVM's
default lowering of the same fused function, raw JSON.

Why: a 512-token prefill of the 0.5B model spent 9 % of its CPU time in this one kernel
(benchmarks/results/cpu_prefill_profile_2026-12-04/): unscheduled, it ran its fused ops as
separate serial loops with one scalar `expf` per element. This builds the kernel the way a
model's MLP does (nn `split` of the gate_up product, `silu`, multiply; Relax legalization
and fusion as compiler/pipeline.py runs them), compiles it for the models' CPU target with
and without the rule, and times both, alternating, for each row count (tokens) at the
0.5B model's intermediate width 4864, with TVM's worker pool sized as the model runner
sizes it. Per call: wall and this process's CPU seconds (both workers). Also recorded: the
largest relative error of each against silu(gate) * up in float64.

usage: python3 benchmarks/cpu_silu_mul.py [--rows 1,512] [--width 4864] [--repeats 20]
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
from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

from vllm_tvm.schedules.cpu_elementwise import CPUElementwise


class _SwiGLU(nn.Module):
    def forward(self, gate_up: nn.Tensor) -> nn.Tensor:
        gate, up = op.split(gate_up, 2, axis=-1)
        return op.silu(gate) * up


def fused_silu_mul(width: int) -> tvm.tirx.PrimFunc:
    """The fused TIR function of silu(gate) * up over [1, rows, 2 * width] (rows symbolic)."""
    spec = {"forward": {"gate_up": nn.spec.Tensor([1, "rows", 2 * width], "float32")}}
    mod, _ = _SwiGLU().export_tvm(spec)
    fuse = tvm.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )
    (func,) = [f for f in fuse(mod).functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    return func


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1,512")
    parser.add_argument("--width", type=int, default=4864)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    setup = cpu_pool_and_target()
    target = setup["target"]
    func = fused_silu_mul(args.width)
    with target:
        scheduled = CPUElementwise().apply(func, target, False).mod["main"]
    kernels = {
        name: tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target)
        for name, f in (("default", func), ("ours", scheduled))
    }
    rng = np.random.default_rng(0)
    results = {}
    for rows in [int(n) for n in args.rows.split(",")]:
        gate_up = rng.uniform(-12, 12, (1, rows, 2 * args.width)).astype(np.float32)
        gate, up = gate_up[..., : args.width].astype(np.float64), gate_up[..., args.width :]
        expected = gate / (1 + np.exp(-gate)) * up
        inputs = tvm.runtime.tensor(gate_up, tvm.cpu())
        outputs = {k: tvm.runtime.empty((1, rows, args.width), "float32") for k in kernels}
        calls = {
            name: lambda kernel=kernel, bound=(inputs, outputs[name]): kernel(*bound)
            for name, kernel in kernels.items()
        }
        raw, medians = alternating_times(calls, args.repeats)
        errors = {
            k: float(np.max(np.abs(v.numpy() - expected) / np.maximum(np.abs(expected), 1e-30)))
            for k, v in outputs.items()
        }
        print(rows, json.dumps(medians), errors, flush=True)
        results[str(rows)] = {
            "median": medians,
            "default_over_ours_wall": medians["default"]["wall_s"] / medians["ours"]["wall_s"],
            "max_relative_error_vs_float64": errors,
            "raw": raw,
            "load_average_after": os.getloadavg(),
        }
    fields = {"width": args.width, "input_range": [-12, 12]}
    write_report(args.out, __doc__, setup, fields, results)


if __name__ == "__main__":
    main()
