"""Where one lone request's time goes at the engine level: intake, each `step()` call, and the
engine's own first-token time against the whole call (a diagnostic, printed as JSON lines).

Why: vLLM's TTFT is the wall time of a lone prompt's `generate` call for one token, while
`vllm-tvm bench` reports the engine's first-token time inside a longer request. On the H200 the
two differed by about 2 ms (docs/BENCHMARKS.md); this splits a lone request's call into its
parts, request after request in one process, to see which part differs.

usage (on the GPU box): PYTHONPATH=.device/tvm_bundle:.:benchmarks python3
    benchmarks/lone_request_timing.py --model CONFIG_DIR --artifact A [--device cuda]
    [--input-len 1024] [--requests 9]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from engine_decode import bench_engine

from vllm_tvm.benchmarking.decode_only import PromptSource, bench_sampling_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--artifact", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=9)
    args = parser.parse_args()
    _, _, engine = bench_engine(
        args.model,
        concurrency=(1,),
        input_len=args.input_len,
        output_len=2,
        device=args.device,
        dtype="auto",
        artifact=args.artifact,
        load_format="dummy",
        max_num_batched_tokens=8192,
        num_blocks=None,
        seed=0,
        async_scheduling=None,
    )
    prompts = PromptSource(engine.runner.vocab_size, args.input_len, 0)
    for index in range(args.requests):
        engine.reset_prefix_cache()
        started = time.perf_counter()
        engine.add_request(
            f"r{index}", prompts.take(1)[0], bench_sampling_params(1), output_kind="delta"
        )
        admitted = time.perf_counter()
        marks, outputs = [], []
        while engine.has_unfinished:
            outputs = engine.step()
            marks.append((time.perf_counter(), len(outputs)))
        record = {
            "add_ms": round((admitted - started) * 1e3, 3),
            "steps_ms": [round((mark - admitted) * 1e3, 3) for mark, _ in marks],
            "outputs": [count for _, count in marks],
            "ttft_metric_ms": round(outputs[0].metrics.time_to_first_token * 1e3, 3),
            "total_ms": round((marks[-1][0] - started) * 1e3, 3),
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
