"""On a CUDA machine: kernel-level references for benchmarks/h200_llama.py's profiles — the
cuBLASLt extension against torch.matmul on a model's projection shapes, and torch SDPA on one
layer's attention shapes.

Why a module of its own: these time single kernels, not the model; h200_llama.py reads its
per-function profiles against them, and both share `timed`.
"""

from __future__ import annotations

import statistics
import time

import torch

from vllm_tvm.runtime.model.runner import ModelRunner


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def uses_cublaslt(runner: ModelRunner) -> bool:
    """Whether the artifact's matmuls call the cuBLASLt extension (which gemm_bench times)."""
    from vllm_tvm.extensions.cublaslt import EXTENSION_NAME

    return EXTENSION_NAME in runner.manifest.extensions


def gemm_bench(tvm_module, config: dict, report: dict) -> None:
    """cuBLASLt extension vs torch.matmul (x @ w.T) on the model's projection shapes, bf16;
    TFLOP/s from CUDA events over 20 calls, and the largest relative difference."""
    import tvm_ffi

    gemm = tvm_ffi.get_global_func("vllm_tvm.cublaslt.gemm_nt")
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    shapes = {
        "qkv": ((heads + 2 * kv_heads) * head_dim, hidden),
        "o": (hidden, heads * head_dim),
        "gate_up": (2 * inter, hidden),
        "down": (hidden, inter),
    }
    rows = {}
    for m in (1024, 256, 64, 16):
        for label, (n, k) in shapes.items():
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            tx, tw, tout = (tvm_module.runtime.from_dlpack(t) for t in (x, w, out))

            def ours(tx=tx, tw=tw, tout=tout):
                gemm(tx, tw, tout)

            def theirs(x=x, w=w):
                torch.matmul(x, w.t())

            ours()
            diff = float((out.float() - torch.matmul(x, w.t()).float()).abs().max())
            scale = float(torch.matmul(x, w.t()).float().abs().max())
            result = {"max_rel_diff": diff / scale}
            for name, fn in (("cublaslt_ext", ours), ("torch", theirs)):
                for _ in range(3):
                    fn()
                begin, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                begin.record()
                for _ in range(20):
                    fn()
                end.record()
                torch.cuda.synchronize()
                seconds = begin.elapsed_time(end) / 1e3 / 20
                result[f"{name}_tflops"] = round(2 * m * n * k / seconds / 1e12, 1)
            result["ratio"] = round(result["cublaslt_ext_tflops"] / result["torch_tflops"], 3)
            rows[f"m{m}_{label}_n{n}_k{k}"] = result
            print("gemm", f"m{m}_{label}_n{n}_k{k}", result, flush=True)
    report["gemm_bench"] = rows


def attention_bench(config: dict, report: dict) -> None:
    """torch SDPA (flash backend) on one layer's attention shapes, to read our profile's
    attention kernels against: causal prefill of 1,024 tokens, and decode of 64 sequences
    over 1,024 cached tokens each."""
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    cases = {
        "prefill_1024": (1, 1024, 1024, True),
        "decode_b64_ctx1024": (64, 1, 1024, False),
    }
    for label, (batch, q_len, kv_len, causal) in cases.items():
        q = torch.randn(batch, heads, q_len, head_dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, kv_heads, kv_len, head_dim, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)

        def sdpa(q=q, k=k, v=v, causal=causal):
            torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, enable_gqa=True
            )

        seconds = statistics.median(timed(sdpa, 20))
        report[f"torch_sdpa_{label}_ms_per_layer"] = round(seconds * 1e3, 4)
        print(f"torch sdpa {label}: {seconds * 1e3:.4f} ms per layer", flush=True)
