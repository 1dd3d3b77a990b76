"""Per-kernel CPU and wall time of one prefill of one GGUF file, raw JSON: an A/B of two code
versions is this script run from each tree in turn (A B B A).

Why: cpu_peers.py gives one tok/s figure per round, which moves 10-30 % between runs on
these shared VMs; a kernel change is seen better per VM call, where an unchanged GEMM shows
the drift and the changed kernel its own time. This runs cpu_profile_shares.py's
`prefill_case` (a `--length`-token prefill into an empty cache, `--repeats` times after one
untimed, each VM call timed by the instrument hook) on `--gguf`, default the 0.5B F16 file.

usage: python3 benchmarks/cpu_prefill_profile.py --label NAME --out benchmarks/results/X.json
           [--gguf FILE] [--length 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from cpu_peer_models import F16, model_path
from cpu_peers import DEFAULT_CACHE
from cpu_profile_shares import prefill_case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", type=Path, default=model_path(DEFAULT_CACHE, F16))
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", required=True, help="which code version runs (recorded)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    before = os.getloadavg()
    case = prefill_case(args.gguf, args.length, args.repeats)
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_before": before,
        "load_after": os.getloadavg(),
        "code": args.label,
        "settings": {k: str(v) for k, v in vars(args).items()},
        "prefill": case,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    symbols = case["per_prefill"]
    print(args.label, {k: round(v["wall_ms"], 1) for k, v in list(symbols.items())[:8]})


if __name__ == "__main__":
    main()
