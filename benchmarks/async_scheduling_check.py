"""On any device: the engine with async scheduling gives every request exactly what the
synchronous engine gives it, at a real model shape (dummy weights, token-id prompts).

Why: tests/test_engine_async_scheduling.py checks this on the CPU with tiny models, where a
forward runs on the host's own threads. On a GPU the forward really runs while the host
renders the previous step's text, and the logits a CUDA-graph replay writes live in a buffer
the next replay reuses, so the same check is repeated there. Two engines on one artifact
(one synchronous, one async) run the same requests: greedy and seeded-sampled, several
`max_tokens`, stop ids that end some requests early and `min_tokens`, batched at once and
one at a time (batch 1 takes the CUDA-graph `decode_single` path). Tokens and finish
reasons must be equal.

usage: python3 benchmarks/async_scheduling_check.py --model CONFIG_DIR [--artifact A]
           [--device cuda] [--requests 24] [--input-len 200] --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from engine_decode import bench_engine

from vllm_tvm.runtime.engine.llm_engine import LLMEngine
from vllm_tvm.runtime.sampling.params import SamplingParams


def workload(vocab: int, requests: int, input_len: int) -> list[tuple[list[int], SamplingParams]]:
    """Prompts and sampling parameters covering the paths async scheduling changes."""
    rng = random.Random(0)
    cases = []
    for index in range(requests):
        prompt = [rng.randrange(100, vocab - 100) for _ in range(rng.randint(8, input_len))]
        kind = index % 4
        if kind == 0:
            params = SamplingParams(temperature=0.0, max_tokens=rng.randint(2, 64), ignore_eos=True)
        elif kind == 1:
            params = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=48, seed=index)
        else:  # stop ids drawn from a small range the random model often emits
            stops = rng.sample(range(100, vocab - 100), (vocab - 200) // 64)
            params = SamplingParams(
                temperature=0.0,
                max_tokens=64,
                stop_token_ids=stops,
                min_tokens=5 if kind == 3 else 0,
            )
        cases.append((prompt, params))
    return cases


def run(engine: LLMEngine, cases: list[tuple[list[int], SamplingParams]], together: bool) -> dict:
    """Every request's tokens and finish reason, all queued at once or one at a time."""
    results: dict[str, Any] = {}
    pending = list(enumerate(cases))
    while pending:
        batch = pending if together else pending[:1]
        pending = [] if together else pending[1:]
        for index, (prompt, params) in batch:
            engine.add_request(f"r{index}", prompt, params)
        while engine.has_unfinished:
            for output in engine.step():
                if output.finished:
                    completion = output.outputs[0]
                    results[output.request_id] = [
                        list(completion.token_ids),
                        completion.finish_reason,
                    ]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--artifact", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--input-len", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    options = dict(
        concurrency=(args.requests,),
        input_len=args.input_len,
        output_len=64,
        device=args.device,
        artifact=args.artifact,
        load_format="dummy",
        max_num_batched_tokens=4096,
    )
    report: dict[str, Any] = {"device": args.device, "requests": args.requests}
    outputs = {}
    for mode in (False, True):
        _, _, engine = bench_engine(args.model, async_scheduling=mode, **options)
        assert engine.async_scheduling is mode
        cases = workload(engine.runner.vocab_size, args.requests, args.input_len)
        outputs[mode] = {
            "batched": run(engine, cases, True),
            "one_by_one": run(engine, cases, False),
        }
        del engine
    for shape in ("batched", "one_by_one"):
        sync, overlapped = outputs[False][shape], outputs[True][shape]
        differing = sorted(rid for rid in sync if sync[rid] != overlapped.get(rid))
        reasons: dict[str, int] = {}
        for _, reason in sync.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        report[shape] = {"requests": len(sync), "differing": differing, "finish_reasons": reasons}
        print(shape, json.dumps(report[shape]), flush=True)
    report["equal"] = not any(report[shape]["differing"] for shape in ("batched", "one_by_one"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
