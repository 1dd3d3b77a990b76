"""Our CPU runner with TVM's pool at one worker against the default pool, interleaved.

Why: the default pool (one pinned worker per usable CPU, runtime/model/cpu_threads.py)
replaced TVM's own sizing, which starts one worker on these 2-vCPU VMs; `VLLM_TVM_CPU_THREADS=1`
reproduces that. Both arms run cpu_peers.py's runner measurement (same definitions) in fresh
processes, A B, B A, ... so that the machine's drift falls on both; the JSON keeps every raw
figure with the load average around each run.

usage: python3 benchmarks/cpu_threads_ab.py [--prompts 128] [--decode 32] [--rounds 3]
           [--repetitions 3] --out benchmarks/results/X.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from datetime import datetime, timezone
from pathlib import Path

from cpu_peers import default_gguf, machine, run_ours, versions

ARMS = {"one_worker": {"VLLM_TVM_CPU_THREADS": "1"}, "default_pool": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", default="128")
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    gguf = default_gguf()
    rounds = []
    for index in range(args.rounds):
        order = list(ARMS) if index % 2 == 0 else list(reversed(ARMS))
        record: dict = {"order": order}
        for arm in order:
            before = os.getloadavg()
            record[arm] = run_ours(gguf, args, ARMS[arm])
            record[arm]["load_average_before"], record[arm]["load_average_after"] = (
                before,
                os.getloadavg(),
            )
        metrics = [key for key in record["default_pool"] if key.endswith("_tok_s")]
        record["ratio"] = {
            key: record["default_pool"][key] / record["one_worker"][key] for key in metrics
        }
        print(f"round {index}: {json.dumps(record['ratio'])}", flush=True)
        rounds.append(record)
    summary = {
        key: {arm: statistics.median(r[arm][key] for r in rounds) for arm in ARMS}
        | {"ratio_median": statistics.median(r["ratio"][key] for r in rounds)}
        for key in rounds[0]["ratio"]
    }
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": gguf.name,
        "arms": ARMS,
        "machine": machine(),
        "versions": versions(),
        "settings": vars(args) | {"out": str(args.out)},
        "summary": summary,
        "rounds": rounds,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
