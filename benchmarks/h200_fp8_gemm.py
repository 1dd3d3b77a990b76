"""The cuBLASLt extension's FP8 GEMM on a GPU: exactness against a float reference and speed
against the extension's bf16 GEMM and torch's row-wise scaled FP8 GEMM, on Llama-3.1-8B's
projection shapes.

Why this exists: CPU tests prove which products an FP8 artifact sends to
`vllm_tvm.cublaslt.gemm_fp8_nt` and the activation encoding; only a GPU shows that the call
computes x_scale[m] * w_scale[n] * (x . w^T) and whether FP8 pays. Same level on every
side: one GEMM call on device-resident operands, CUDA events over 20 calls after 3 untimed
ones. The per-token activation quantization kernel that precedes the FP8 GEMM in an
artifact is not included (torch's arm excludes its own quantization the same way).

`--quantize-kernel LIB` also checks, on the GPU, the per-token activation quantization
(schedules/fp8_activation.py) as the artifacts compile it: LIB is built on a CPU box with
`--build-quantize-kernel LIB` (the compiler's lowering pipeline for sm_90a), and its codes
and scales must equal torch's (`amax / 448`, then the float8_e4m3fn cast) bit for bit.

usage (on the GPU box; the extension comes from any CUDA artifact built with cuBLASLt):
  PYTHONPATH=<tvm bundle>:<code> python3 benchmarks/h200_fp8_gemm.py \
      --extension ARTIFACT/cublaslt_gemm.so [--quantize-kernel LIB] --out r.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
"""(n, k) of Llama-3.1-8B's projections."""
ROWS = (16, 64, 256, 1024, 4096)
E4M3_MAX = 448.0


def _seconds(fn, calls: int = 20) -> float:
    for _ in range(3):
        fn()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / 1e3 / calls


def _row_quantized(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 codes, float32 scale per row) with scale = amax(|row|) / 448."""
    scale = values.float().abs().amax(dim=1).clamp(min=1e-12) / E4M3_MAX
    codes = (values.float() / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return codes, scale


def measure(m: int, n: int, k: int, tvm: Any) -> dict[str, float]:
    import tvm_ffi

    fp8_gemm = tvm_ffi.get_global_func("vllm_tvm.cublaslt.gemm_fp8_nt")
    bf16_gemm = tvm_ffi.get_global_func("vllm_tvm.cublaslt.gemm_nt")
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    xq, xs = _row_quantized(x)
    wq, ws = _row_quantized(w)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    out16 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fp8_args = [
        tvm.runtime.from_dlpack(t)
        for t in (xq.view(torch.uint8), wq.view(torch.uint8), xs, ws, out)
    ]
    bf16_args = [tvm.runtime.from_dlpack(t) for t in (x, w, out16)]
    fp8_gemm(*fp8_args)
    torch.cuda.synchronize()
    reference = (xq.float() * xs[:, None]) @ (wq.float() * ws[:, None]).t()
    relative = float((out.float() - reference).abs().max() / reference.abs().max())
    seconds = {
        "ours_fp8": _seconds(lambda: fp8_gemm(*fp8_args)),
        "ours_bf16": _seconds(lambda: bf16_gemm(*bf16_args)),
        "torch_scaled_mm_fp8_rowwise": _seconds(
            lambda: torch._scaled_mm(
                xq, wq.t(), scale_a=xs[:, None], scale_b=ws[None, :], out_dtype=torch.bfloat16
            )
        ),
    }
    flops = 2.0 * m * n * k
    return {
        "max_relative_error_vs_float_reference": relative,
        **{f"{name}_tflops": flops / s / 1e12 for name, s in seconds.items()},
        "fp8_speedup_over_bf16": seconds["ours_bf16"] / seconds["ours_fp8"],
    }


def build_quantize_kernel(path: Path) -> None:
    """Compile the activation quantization alone for sm_90a, as artifacts lower it."""
    import tvm
    from tvm import relax

    from vllm_tvm.compiler.cuda_build import build_relax_module, export
    from vllm_tvm.compiler.pipeline import lowering_pipeline
    from vllm_tvm.compiler.targets import resolve_target
    from vllm_tvm.schedules.fp8_activation import quantize_tokens, token_scales

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([tvm.tirx.Var("rows", "int64"), 4096], "bfloat16"))
    with builder.function("quantize", [x]):
        with builder.dataflow():
            scales = builder.emit_te(token_scales, x)
            codes = builder.emit_te(quantize_tokens, x, scales)
            output = builder.emit_output(relax.Tuple([codes, scales]))
        builder.emit_func_output(output)
    spec = resolve_target("cuda")
    executable = build_relax_module(
        builder.get(), spec, relax_pipeline=lowering_pipeline(spec.make_target())
    )
    export(executable, path, spec)


def check_quantize_kernel(library: Path, tvm: Any) -> dict[str, Any]:
    """The compiled quantization's codes and scales against torch's, on random bf16 rows."""
    device = tvm.cuda(0)
    vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(str(library)), device)
    rows = {}
    for m in (1, 7, 1024):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        x *= torch.logspace(-4, 3, m, device="cuda", dtype=torch.bfloat16)[:, None]
        codes, scales = vm["quantize"](tvm.runtime.from_dlpack(x))
        ours_codes = torch.from_dlpack(codes).cpu()
        ours_scales = torch.from_dlpack(scales).cpu()
        expected_codes, expected_scales = _row_quantized(x)
        rows[f"m{m}"] = {
            "scales_equal": bool(torch.equal(ours_scales, expected_scales.cpu())),
            "codes_differing": int(
                (ours_codes != expected_codes.view(torch.uint8).cpu()).sum().item()
            ),
        }
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extension", type=Path)
    parser.add_argument("--quantize-kernel", type=Path)
    parser.add_argument("--build-quantize-kernel", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.build_quantize_kernel is not None:
        build_quantize_kernel(args.build_quantize_kernel)
        return 0
    from vllm_tvm.extensions.cublaslt import load_cublaslt_extension
    from vllm_tvm.runtime.tvm_runtime import load_runtime

    tvm = load_runtime(require_cuda=True)
    load_cublaslt_extension(args.extension, tvm.cuda(0))
    report: dict[str, Any] = {
        "script": "benchmarks/h200_fp8_gemm.py",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "conditions": "one GEMM call, operands on the device, CUDA events over 20 calls after "
        "3 untimed; bf16 output; activation quantization excluded on both FP8 arms",
        "shapes": {},
    }
    if args.quantize_kernel is not None:
        report["quantize_kernel"] = check_quantize_kernel(args.quantize_kernel, tvm)
        print("quantize kernel", json.dumps(report["quantize_kernel"]), flush=True)
    for m in ROWS:
        for label, (n, k) in SHAPES.items():
            row = measure(m, n, k, tvm)
            report["shapes"][f"{label}_m{m}"] = {"m": m, "n": n, "k": k, **row}
            print(label, m, json.dumps(row), flush=True)
    args.out.write_text(json.dumps(report, indent=2))
    worst = max(r["max_relative_error_vs_float_reference"] for r in report["shapes"].values())
    kernel = report.get("quantize_kernel", {}).values()
    exact = all(r["scales_equal"] and r["codes_differing"] == 0 for r in kernel)
    return 0 if worst <= 1e-2 and exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
