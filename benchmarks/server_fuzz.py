"""Fuzz the OpenAI server with thousands of requests generated from its OpenAPI schema.

The same fuzzer as tests/test_server_fuzz.py (schemathesis over hypothesis: schema-valid
and schema-violating bodies for every route), run long: it serves the tests' tiny chat
checkpoint (made and compiled on first use into the usual cache) from a small engine, sends
`--examples` requests, and reports the status codes. It fails (exit 1) on any 5xx, or when
the engine no longer serves a plain request with every KV block freed afterwards.

    python benchmarks/server_fuzz.py --examples 2000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from server_fuzz import FUZZ_ENGINE, engine_still_serves, fuzz
from server_helpers import make_server_model, start_farm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="requests to generate")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        farm = start_farm(make_server_model(Path(tmp) / "model"), **FUZZ_ENGINE)
        try:
            server = farm.server()
            started = time.perf_counter()
            report = fuzz(server, args.examples, args.seed)
            seconds = time.perf_counter() - started
            healthy = engine_still_serves(server)
        finally:
            farm.stop()
    print(
        json.dumps(
            {
                "requests": report.requests,
                "statuses": dict(sorted(report.statuses.items())),
                "server_errors": report.server_errors,
                "engine_healthy_after": healthy,
                "seconds": round(seconds, 1),
            },
            indent=2,
        )
    )
    return 0 if healthy and not report.server_errors else 1


if __name__ == "__main__":
    sys.exit(main())
