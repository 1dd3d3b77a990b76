"""What a speculative verify forward costs in decode steps on the default model, in CPU time.

Why: n-gram speculation on CPU pays only if verifying k drafts (a ragged prefill of k + 1
tokens after the context) costs few decode steps. This runs the default model (SmolLM2-135M
Q4_1, native weights) at the runner level after a 300-token context and times, interleaved
in every round, the batch-1 decode forward and prefill forwards of 2, 5 and 9 tokens
(verifying 1, 4, 8 drafts): medians of this process's CPU time (all of TVM's workers count;
run with VLLM_TVM_CPU_THREADS=1 for a one-core figure) and of the wall time, and each
prefill's CPU median in decode steps. `--kernels` adds, for the decode and the 5-token
forward, the split by the Relax VM's calls (cpu_decode_profile.py's instrument hook: read
its shares, not its milliseconds). Which tree's `vllm_tvm` runs is PYTHONPATH's.

usage: VLLM_TVM_CPU_THREADS=1 PYTHONPATH=. python3 benchmarks/cpu_verify_forward.py
           [--rounds 15] [--context 300] [--kernels] --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from cpu_decode_profile import vm_call_shares
from cpu_peers import machine

from vllm_tvm.checkpoints.default_model import default_model_path
from vllm_tvm.entrypoints.llm import LLM

TOKEN_COUNTS = (0, 2, 5, 9)
"""0: the decode forward; otherwise a prefill of that many tokens after the context."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--kernels", action="store_true", help="add the per-call split")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    load_before = os.getloadavg()
    llm = LLM(default_model_path(), show_progress=False)
    runner, kv_id = llm.runner, 7
    runner.kv_cache.add_sequence(kv_id)
    runner.prefill([kv_id], [list(range(100, 100 + args.context))])

    def forward(count: int) -> None:
        """One forward of `count` tokens (0: decode) after the context, then forgotten."""
        if count == 0:
            runner.decode_logits([kv_id], [5]).argmax()
        else:
            runner.prefill_logits([kv_id], [[5] * count], list(range(count))).argmax()
        runner.kv_cache.popn(kv_id, max(count, 1))

    raw: dict[str, list[tuple[float, float]]] = {}
    for index in range(args.rounds + 1):
        for count in TOKEN_COUNTS if index % 2 == 0 else reversed(TOKEN_COUNTS):
            wall, cpu = time.perf_counter(), time.process_time()
            forward(count)
            sample = (time.process_time() - cpu, time.perf_counter() - wall)
            if index > 0:  # the first round warms up
                raw.setdefault("decode" if count == 0 else f"prefill_{count}", []).append(sample)
    kernels = {}
    if args.kernels:
        for name, count in (("decode", 0), ("prefill_5", 5)):
            kernels[name] = vm_call_shares(runner, lambda c=count: forward(c), args.rounds)
    runner.kv_cache.remove_sequence(kv_id)
    cpu_ms = {name: statistics.median(c for c, _ in s) * 1e3 for name, s in raw.items()}
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": vars(args) | {"out": str(args.out)},
        "cpu_threads_env": os.environ.get("VLLM_TVM_CPU_THREADS"),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpu_ms": cpu_ms,
        "wall_ms": {name: statistics.median(w for _, w in s) * 1e3 for name, s in raw.items()},
        "decode_steps": {name: ms / cpu_ms["decode"] for name, ms in cpu_ms.items()},
        "raw_cpu_wall_s": raw,
        "kernels": kernels,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("cpu_ms", "wall_ms", "decode_steps")}))


if __name__ == "__main__":
    main()
