"""On a CUDA machine: where the device time of one decode step (and one prefill) goes, from
the CUDA activity timeline rather than from synchronised per-call timers.

Why: the per-function profile of benchmarks/h200_llama.py synchronises around every VM call,
which inflates small kernels and hides whether the GPU ever waits for the host. Here
torch.profiler's CUPTI trace (process-wide, so it sees TVM's kernels, cuBLASLt's and
FlashInfer's) records every kernel of a few warm steps; from it: wall time per step, the
GPU-busy time (union of kernel intervals), the idle gaps between kernels, and the kernel time
per category. A step whose busy time is close to its wall time is device-bound (the lever is
kernel work); one with large gaps is host-bound (the lever is graphs and host work).

usage (on the GPU box; artifact and runtime bundle built elsewhere):
  PYTHONPATH=.device/tvm_bundle:.:benchmarks python3 benchmarks/h200_step_timeline.py
      --artifact A --config C [--batches 1,64] [--context 1024] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import torch
from h200_llama import dlpack_params, make_oracle, prefill_in_chunks
from torch.profiler import ProfilerActivity, profile

from vllm_tvm.runtime.model.runner import ModelRunner

CATEGORIES = (
    ("attention", ("attention", "flashinfer", "batch_decode", "prefill", "merge_state")),
    ("kv_append", ("append", "rotary", "rope", "split_rotary")),
    ("gemm_cublaslt", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas")),
    ("gemv_tir", ("nt_matmul", "matmul")),
    ("norm", ("rms_norm", "norm")),
    ("silu_mul", ("silu", "multiply")),
    ("add", ("add",)),
    ("sampling", ("argmax", "sample", "softmax", "take")),
)


def category(name: str) -> str:
    lowered = name.lower()
    for label, keys in CATEGORIES:
        if any(key in lowered for key in keys):
            return label
    return "other"


def timeline(step, steps: int) -> dict:
    """Run `step` `steps` times under CUPTI; per-step wall, busy, gaps and categories."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / steps
    kernels = sorted(
        (event.time_range.start, event.time_range.end, event.name)
        for event in prof.events()
        if event.device_type == torch.autograd.DeviceType.CUDA
    )
    busy = 0.0
    gaps: list[float] = []
    where: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    cursor, last_name = None, ""
    for begin, end, name in kernels:
        if cursor is None or begin > cursor:
            if cursor is not None:
                gaps.append(begin - cursor)
                where[(last_name[:60], name[:60])].append(begin - cursor)
            busy += end - begin
            cursor = end
        elif end > cursor:
            busy += end - cursor
            cursor = end
        last_name = name if end >= (cursor or 0) else last_name
    # Host-side CUDA API calls (launches, copies, allocations, synchronisations): a call
    # that blocks the host (a pageable copy, a malloc) shows here as long total time.
    api: dict[str, list[float]] = collections.defaultdict(list)
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA and event.name.startswith("cu"):
            api[event.name].append(event.time_range.end - event.time_range.start)
    per_category: dict[str, float] = collections.defaultdict(float)
    per_name: dict[str, float] = collections.defaultdict(float)
    for begin, end, name in kernels:
        per_category[category(name)] += end - begin
        per_name[name[:90]] += end - begin
    us = 1.0 / steps  # event times are µs; report per step
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:25]
    return {
        "wall_ms_per_step": round(wall * 1e3, 4),
        "busy_ms_per_step": round(busy * us / 1e3, 4),
        "kernels_per_step": round(len(kernels) / steps, 1),
        "gap_ms_per_step": round(sum(gaps) * us / 1e3, 4),
        "gaps_over_5us_per_step": round(sum(1 for g in gaps if g > 5) / steps, 1),
        "gap_ms_over_5us_per_step": round(sum(g for g in gaps if g > 5) * us / 1e3, 4),
        "category_ms_per_step": {k: round(v * us / 1e3, 4) for k, v in per_category.items()},
        "top_kernels_ms_per_step": {k: round(v * us / 1e3, 4) for k, v in top},
        # The idle time between two kernels, per (kernel before, kernel after) pair: where
        # the device waits for the host.
        "gaps_by_neighbours_ms_per_step": {
            f"{before} -> {after}": [round(sum(v) * us / 1e3, 4), round(len(v) / steps, 2)]
            for (before, after), v in sorted(where.items(), key=lambda kv: -sum(kv[1]))[:12]
        },
        "host_api_ms_per_step": {
            name: [round(sum(v) * us / 1e3, 4), round(len(v) / steps, 1)]
            for name, v in sorted(api.items(), key=lambda kv: -sum(kv[1]))[:12]
        },
    }


def host_return_ms(launch, finish, steps: int) -> dict:
    """How long the host takes to launch a step (until `launch` returns) against the whole
    step (`finish` on its result, then a device synchronisation): launch ≈ whole means the
    device waits for the host."""
    launched, whole = [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = launch()
        launched.append(time.perf_counter() - start)
        finish(result)
        torch.cuda.synchronize()
        whole.append(time.perf_counter() - start)
    return {
        "launch_ms_median": round(sorted(launched)[steps // 2] * 1e3, 4),
        "whole_ms_median": round(sorted(whole)[steps // 2] * 1e3, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from vllm_tvm.runtime.tvm_runtime import load_runtime

    tvm = load_runtime(require_cuda=True)
    oracle = make_oracle(args.config)
    batches = [int(b) for b in args.batches.split(",")]
    params, _keep = dlpack_params(args.artifact, oracle, tvm)
    del oracle
    runner = ModelRunner(
        args.artifact,
        None,
        device="cuda",
        max_model_len=2048,
        max_batch_size=max([*batches, 4]),
        max_total_seq_len=max(batches) * (args.context + 128) + 4096,
        prefill_chunk_size=2048,
        params=params,
        show_progress=False,
    )
    report: dict = {
        "gpu": torch.cuda.get_device_name(),
        "artifact": str(args.artifact),
        "conditions": {"level": "runner", "context": args.context, "steps": args.steps},
    }
    runner.kv_cache.add_sequence(1)
    prompt = [[7] * args.context]

    def prefill_once() -> None:
        runner.kv_cache.remove_sequence(1)
        runner.kv_cache.add_sequence(1)
        runner.prefill_logits([1], prompt).argmax()

    for _ in range(3):
        prefill_once()
    report["prefill"] = timeline(prefill_once, 5)

    def prefill_launch():
        runner.kv_cache.remove_sequence(1)
        runner.kv_cache.add_sequence(1)
        return runner.prefill_logits([1], prompt)

    report["prefill"]["host"] = host_return_ms(prefill_launch, lambda rows: rows.argmax(), 10)
    print("prefill", json.dumps(report["prefill"]), flush=True)
    runner.kv_cache.remove_sequence(1)
    for batch in batches:
        ids = list(range(100, 100 + batch))
        for sid in ids:
            runner.kv_cache.add_sequence(sid)
        prefill_in_chunks(runner, ids, [[7] * args.context for _ in ids])
        tokens = [[1] * batch]

        def decode_once(ids=ids, tokens=tokens) -> None:
            tokens[0] = runner.decode_logits(ids, tokens[0]).argmax().tolist()

        for _ in range(5):
            decode_once()
        report[f"decode_b{batch}"] = timeline(decode_once, args.steps)
        report[f"decode_b{batch}"]["host"] = host_return_ms(
            lambda ids=ids, tokens=tokens: runner.decode_logits(ids, tokens[0]),
            lambda rows: rows.argmax(),
            args.steps,
        )
        print(f"decode b{batch}", json.dumps(report[f"decode_b{batch}"]), flush=True)
        for sid in ids:
            runner.kv_cache.remove_sequence(sid)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
