"""The attention of one decode step, old path against new, on a CUDA machine: TVM's
`PagedKVCache` (host planning in `begin_forward`, 32 opaque attention calls) against
compiler/device_decode_attention.py (metadata in fixed device buffers, one copy a step, the
32 layers' appends and attentions in one CUDA graph), and on the new path TVM's decode-attention
kernel against ours (schedules/paged_decode_attention.py), both inside the graph.

Level: the attention part of a decode step only (no GEMMs, norms or sampling), Llama-3.1-8B
attention shape (32 q / 8 KV heads, head 128, bf16, 32 layers), every row at `--context`
cached tokens plus the steps taken. Both sides append each step's K/V and attend over the
whole context; neither applies RoPE. Times are per step, wall clock over `--steps` steps
(host work included: the old path's planning, the new path's packing and copy), after
warm-up; the host time to return from a launch is recorded beside it.

Correctness: the new path's output after the timed steps against torch on the same pages
(float32 math, per layer, read through the block tables).

usage:
  here:      python3 benchmarks/h200_decode_capture.py build --out DIR
  GPU box:   PYTHONPATH=BUNDLE:. python3 benchmarks/h200_decode_capture.py run --libs DIR
                 [--batches 1,64] [--context 1024] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM, DTYPE, PAGE = 32, 32, 8, 128, "bfloat16", 16
BATCHES = (1, 64, 256)
SPLITS = {1: (16, 32), 64: (1, 2), 256: (1,)}
"""Split-KV parts per row tried for each bucket, each with both attention kernels."""
KERNELS = ("own", "tvm")
"""compiler/device_decode_attention.py's decode-attention kernels: ours and TVM's."""
MAX_CONTEXT = 1024 + 256
PAGES_PER_ROW = MAX_CONTEXT // PAGE


def _library(kernel: str, rows: int, splits: int) -> str:
    return f"new_{kernel}_b{rows}_s{splits}_graph.so"


def _pages_for(rows: int) -> int:
    return rows * PAGES_PER_ROW


def build(out: Path, only_old: bool = False) -> None:
    """Every library the run needs, for sm_90a: the old path's, and the new path's per
    bucket, split count and attention kernel, with CUDA graphs."""
    import tvm
    from tvm import relax as rx
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache, RopeMode, TIRPagedKVCache

    from vllm_tvm.compiler.cuda_build import build_relax_module, export
    from vllm_tvm.compiler.device_decode_attention import (
        DecodeAttentionShape,
        build_decode_attention_step,
    )
    from vllm_tvm.compiler.pipeline import lowering_pipeline
    from vllm_tvm.compiler.targets import resolve_target

    spec = resolve_target("cuda:sm_90a")
    target = spec.make_target()
    out.mkdir(parents=True, exist_ok=True)
    shape = DecodeAttentionShape(Q_HEADS, KV_HEADS, HEAD_DIM, DTYPE)
    for rows in () if only_old else BATCHES:
        for splits in SPLITS[rows]:
            for kernel in KERNELS:
                mod = build_decode_attention_step(
                    shape, LAYERS, rows, PAGES_PER_ROW, _pages_for(rows), target, splits, kernel
                )
                config = {"relax.backend.use_cuda_graph": True}
                with tvm.transform.PassContext(config=config):
                    executable = build_relax_module(
                        mod, spec, relax_pipeline=lowering_pipeline(target)
                    )
                export(executable, out / _library(kernel, rows, splits), spec)
                print("built new", kernel, rows, splits, flush=True)

    sm_scale = HEAD_DIM**-0.5

    class OldAttention(nn.Module):
        def create_kv_cache(
            self, max_batch_size, max_total_seq_len, prefill_chunk_size, page_size, sliding
        ) -> PagedKVCache:
            return TIRPagedKVCache(
                attn_kind=["mha"] * LAYERS,
                max_batch_size=max_batch_size,
                max_total_seq_len=max_total_seq_len,
                prefill_chunk_size=prefill_chunk_size,
                page_size=page_size,
                support_sliding_window=sliding,
                layer_partition=rx.ShapeExpr([0, LAYERS]),
                num_hidden_layers=LAYERS,
                num_attention_heads=Q_HEADS,
                num_key_value_heads=KV_HEADS,
                qk_head_dim=HEAD_DIM,
                v_head_dim=HEAD_DIM,
                mla_original_qk_head_dim=0,
                mla_original_v_head_dim=0,
                rope_mode=RopeMode.NONE,
                rope_scale=1,
                rope_theta=500000,
                rope_scaling={},
                rope_ext_factors=rx.prim_value(0),
                rotary_dim=HEAD_DIM,
                enable_disaggregation=False,
                dtype=DTYPE,
                target=target,
            )

        def prefill(self, qkv: nn.Tensor, kv_cache: PagedKVCache):
            return self.decode(qkv, kv_cache)

        def decode(self, qkv: nn.Tensor, kv_cache: PagedKVCache):
            return tuple(
                kv_cache.attention_with_fused_qkv(layer, qkv, Q_HEADS, sm_scale)
                for layer in range(LAYERS)
            )

    heads = Q_HEADS + 2 * KV_HEADS
    kv = nn.spec.Object(object_type=PagedKVCache)
    plain = {"param_mode": "none", "effect_mode": "none"}
    export_spec = {
        "create_kv_cache": {
            "max_batch_size": int,
            "max_total_seq_len": int,
            "prefill_chunk_size": int,
            "page_size": int,
            "sliding": int,
            "$": plain,
        },
        # One symbolic size each: a reshape over [b * s] becomes a kernel TVM 0.27 cannot
        # emit for CUDA (a vector of booleans).
        "prefill": {
            "qkv": nn.spec.Tensor([1, "s", heads, HEAD_DIM], DTYPE),
            "kv_cache": kv,
            "$": plain,
        },
        "decode": {
            "qkv": nn.spec.Tensor(["b", 1, heads, HEAD_DIM], DTYPE),
            "kv_cache": kv,
            "$": plain,
        },
    }
    with target:
        mod, _ = OldAttention().export_tvm(spec=export_spec)
    # The project's own build configuration (compiler/build.py): without the CSE switch TVM
    # 0.27 emits a vector of booleans nvcc cannot take in the cache's kernels.
    config = {"tirx.disable_cse_tir": True, "relax.backend.use_cuda_graph": True}
    with tvm.transform.PassContext(config=config):
        executable = build_relax_module(mod, spec, relax_pipeline=lowering_pipeline(target))
    export(executable, out / "old.so", spec)
    print("built old", flush=True)


def _timed(step, steps: int, sync) -> dict:
    for _ in range(5):
        step()
    sync()
    launches = []
    start = time.perf_counter()
    for _ in range(steps):
        begin = time.perf_counter()
        step()
        launches.append(time.perf_counter() - begin)
    sync()
    wall = (time.perf_counter() - start) / steps
    return {
        "step_ms": round(wall * 1e3, 4),
        "host_launch_ms_median": round(sorted(launches)[steps // 2] * 1e3, 4),
    }


def run(
    libs: Path, batches: list[int], context: int, steps: int, out: Path | None, with_old: bool
) -> dict:
    """Every new-path variant of every bucket first, then the old path bucket by bucket
    (its b64 run failed with an illegal address in TVM's decode kernel, twice, which ends
    the process's CUDA context); the report is written to `out` after every bucket, so
    what ran before a failure is kept."""
    import torch

    from vllm_tvm.runtime.tvm_runtime import load_runtime

    tvm = load_runtime(require_cuda=True)
    report: dict = {
        "gpu": torch.cuda.get_device_name(),
        "conditions": {
            "level": "attention of a decode step (append + decode attention, 32 layers)",
            "shape": {
                "layers": LAYERS,
                "q_heads": Q_HEADS,
                "kv_heads": KV_HEADS,
                "head_dim": HEAD_DIM,
                "dtype": DTYPE,
                "page": PAGE,
            },
            "context": context,
            "steps": steps,
            "rope": "none on both sides",
            "timing": "wall clock over the steps after 5 warm-up steps, host work included",
        },
    }
    for rows in batches:
        report[f"b{rows}"] = _new_path(tvm, libs, rows, context, steps)
        _write(report, out)
    for rows in batches if with_old else ():
        entry = report[f"b{rows}"]
        entry["old"] = _old_path(tvm, libs, rows, context, steps)
        for key in [k for k in entry if k.startswith("new_")]:
            entry[key]["speedup_vs_old"] = round(entry["old"]["step_ms"] / entry[key]["step_ms"], 3)
        print(f"b{rows}", json.dumps(entry), flush=True)
        _write(report, out)
    return report


def _write(report: dict, out: Path | None) -> None:
    if out is not None:
        out.write_text(json.dumps(report, indent=1))


def _old_path(tvm, libs: Path, rows: int, context: int, steps: int) -> dict:
    """TVM's paged KV cache, each row prefilled to `context`, then decode steps (sized as
    benchmarks/h200_step_timeline.py sizes the runner's cache)."""
    import torch

    from vllm_tvm.runtime.kv.kv_cache import KVCacheConfig, PagedKVCache

    device = tvm.cuda(0)
    old_vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(str(libs / "old.so")), device)
    heads = Q_HEADS + 2 * KV_HEADS
    gen = torch.Generator(device="cuda").manual_seed(0)
    config = KVCacheConfig(max(rows, 4), rows * (context + 128) + 4096, 2048)
    cache = PagedKVCache(old_vm["create_kv_cache"], config)
    prefill, decode = old_vm["prefill"], old_vm["decode"]
    ids = list(range(rows))
    for sid in ids:
        cache.add_sequence(sid)
        prompt = torch.randn(
            1, context, heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen
        )
        cache.begin_forward([sid], [context])
        prefill(tvm.runtime.from_dlpack(prompt), cache.handle)
        cache.end_forward()
    torch.cuda.synchronize()
    qkv = torch.randn(rows, 1, heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
    qkv_tvm = tvm.runtime.from_dlpack(qkv)

    def old_step() -> None:
        cache.begin_forward(ids, [1] * rows)
        decode(qkv_tvm, cache.handle)
        cache.end_forward()

    return _timed(old_step, steps, torch.cuda.synchronize)


def _new_path(tvm, libs: Path, rows: int, context: int, steps: int) -> dict:
    """Our pages and metadata buffers, every built variant of the bucket in turn, each
    checked against torch after its timed steps."""
    import torch

    from vllm_tvm.runtime.kv.decode_step_buffers import DecodeStepBuffers

    device = tvm.cuda(0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    num_pages = _pages_for(rows)
    page_shape = (num_pages, 2, KV_HEADS, PAGE, HEAD_DIM)
    pages_t = [
        torch.randn(page_shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(LAYERS)
    ]
    pages = [tvm.runtime.from_dlpack(p) for p in pages_t]
    order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(1)).tolist()
    tables = [order[r * PAGES_PER_ROW : (r + 1) * PAGES_PER_ROW] for r in range(rows)]
    q_t = torch.randn(rows, Q_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
    kv_shape = (rows, KV_HEADS, HEAD_DIM)
    k_t, v_t = (
        torch.randn(kv_shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2)
    )
    fixed = [tvm.runtime.from_dlpack(x) for x in (q_t, k_t, v_t)]
    entry: dict = {}
    variants = [(kernel, splits) for splits in SPLITS[rows] for kernel in KERNELS]
    for kernel, splits in variants:
        vm = tvm.runtime.vm.VirtualMachine(
            tvm.runtime.load_module(str(libs / _library(kernel, rows, splits))), device
        )
        step_fn = vm["decode_attention_step"]
        buffers = DecodeStepBuffers(
            rows, PAGES_PER_ROW, PAGE, lambda a: tvm.runtime.tensor(a, device), splits
        )
        lengths = [context] * rows

        def new_step(step_fn=step_fn, buffers=buffers, lengths=lengths):
            for i in range(len(lengths)):
                lengths[i] = min(lengths[i] + 1, MAX_CONTEXT)
            buffers.update(tables, lengths)
            return step_fn(*fixed, *buffers.kernel_arguments(), *pages)

        key = f"new_{kernel}_s{splits}_graph"
        entry[key] = _timed(new_step, steps, torch.cuda.synchronize)
        # One more step, then check it against torch on the same pages.
        out_t = torch.from_dlpack(new_step())
        torch.cuda.synchronize()
        entry[key].update(_check(pages_t, tables, lengths, q_t, out_t))
        print(key, json.dumps(entry[key]), flush=True)
    return entry


def _check(pages_t, tables, lengths, q_t, out_t) -> dict:
    """The chained layers recomputed in torch (float32 math, bf16 between layers, as the
    kernels store), over the pages as the step left them (its appends included)."""
    import torch

    group = Q_HEADS // KV_HEADS
    query = q_t.float()
    for pages in pages_t:
        out = torch.empty_like(query)
        for row, (table, length) in enumerate(zip(tables, lengths, strict=True)):
            idx = torch.arange(length, device="cuda")
            page_ids = torch.tensor(table, device="cuda")[idx // PAGE]
            keys = pages[page_ids, 0, :, idx % PAGE].float()  # [len, kv, d]
            values = pages[page_ids, 1, :, idx % PAGE].float()
            keys = keys.repeat_interleave(group, dim=1)
            values = values.repeat_interleave(group, dim=1)
            scores = torch.einsum("hd,lhd->hl", query[row], keys) / math.sqrt(HEAD_DIM)
            out[row] = torch.einsum("hl,lhd->hd", scores.softmax(-1), values)
        query = out.bfloat16().float()
    return {
        "max_abs_err_vs_torch": float((out_t.float() - query).abs().max()),
        "max_abs_torch": float(query.abs().max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    build_args = sub.add_parser("build")
    build_args.add_argument("--out", type=Path, required=True)
    build_args.add_argument("--only-old", action="store_true")
    run_args = sub.add_parser("run")
    run_args.add_argument("--libs", type=Path, required=True)
    run_args.add_argument("--batches", default=",".join(map(str, BATCHES)))
    run_args.add_argument("--context", type=int, default=1024)
    run_args.add_argument("--steps", type=int, default=50)
    run_args.add_argument("--out", type=Path)
    run_args.add_argument("--with-old", action="store_true", help="also TVM's PagedKVCache")
    args = parser.parse_args()
    if args.command == "build":
        build(args.out, args.only_old)
        return
    batches = [int(b) for b in args.batches.split(",")]
    run(args.libs, batches, args.context, args.steps, args.out, args.with_old)
    print("done")


if __name__ == "__main__":
    main()
