"""KV-cache bytes per token that TVM's runtime actually allocates for a compiled model.

Why: for a latent-attention model (DeepSeek) the cache should hold kv_lora_rank + rope dim
values per token and layer, not 2 x heads x head_dim. The runner's `kv_bytes_per_token`
(which sizes the KV pool) says so; this measures the allocation itself: the process's
virtual size (VmSize, which grows by every mapped allocation whether or not it is touched)
after creating caches of several sizes, and the slope between them. Page-table side arrays
are per sequence and per page, not per token, so they stay out of the slope.

usage: python3 benchmarks/kv_bytes_per_token.py --model CHECKPOINT_DIR --out FILE.json
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.benchmarking.report import host, versions
from vllm_tvm.compiler.build import compile_cached, make_request
from vllm_tvm.runtime.model.runner import ModelRunner

TOKENS = (1 << 16, 1 << 17, 1 << 18)


def _virtual_bytes() -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    artifact = compile_cached(make_request(CompileOptions(args.model, dtype="float32")), False)
    runner = ModelRunner(artifact, args.model, "cpu", 64, show_progress=False)
    runner.resize_kv_cache(16)
    base = _virtual_bytes()
    grown = {}
    for tokens in TOKENS:
        runner.resize_kv_cache(16)
        runner.resize_kv_cache(tokens)
        grown[tokens] = _virtual_bytes() - base
    slopes = [(grown[high] - grown[low]) / (high - low) for low, high in pairwise(TOKENS)]
    config = runner.manifest.model_config
    report = {
        "benchmark": "kv_bytes_per_token",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "architecture": runner.manifest.architecture,
        "dtype": runner.manifest.dtype,
        "host": host(),
        "versions": versions(),
        "model_config": config,
        "virtual_bytes_grown_by_tokens": grown,
        "measured_bytes_per_token": slopes,
        "runner_kv_bytes_per_token": runner.kv_bytes_per_token,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(
        json.dumps(
            {k: report[k] for k in ("measured_bytes_per_token", "runner_kv_bytes_per_token")}
        )
    )


if __name__ == "__main__":
    main()
