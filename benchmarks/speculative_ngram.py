"""Decode tok/s at batch 1 with n-gram speculation against without, interleaved A/B.

Why it exists: speculation pays off only when the verify forward of k+1 tokens costs less
than the tokens it commits would cost one decode at a time, and it costs something when
its drafts are not accepted. Both depend on the model's CPU kernels and on the workload, so
they are measured on the default model with two workloads:

- `copy`: a piece of this repository's code, then "# The same code again, copied
  unchanged:" and its first lines, as a plain completion: the input-copying work n-gram
  prompt lookup is made for (SmolLM2-135M does not copy when asked in a chat turn);
- `reject`: the same prompts with every draft token replaced by another one, so that no
  draft is ever accepted: the cost of verifying drafts that all fail (bounded by the
  drafting backoff, runtime/speculative/backoff.py);
- `free`: chat prompts asking for new prose, where lookups find what comes next only now
  and then.

One engine serves both arms: the B arm runs with the engine's speculator detached, which is
exactly the engine built without `speculative_config`. Arms alternate A, B, A, B, ... per
prompt (the machine is shared and its load drifts). Decode tok/s of a request is vLLM's:
tokens after the first over the seconds after the first token. Greedy, so both arms must
produce the same tokens; the script checks that they do.

usage:  PYTHONPATH=. python benchmarks/speculative_ngram.py [--max-tokens 128] [--pairs 2]
        [--num-speculative-tokens 4] [--prompt-lookup-min 2] [--prompt-lookup-max 4]
        --out benchmarks/results/speculative_ngram_DATE.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from vllm_tvm.benchmarking.report import host, versions
from vllm_tvm.checkpoints.default_model import DEFAULT_MODEL_NAME, default_model_path
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

ROOT = Path(__file__).resolve().parents[1]
COPY_SOURCES = (
    "vllm_tvm/runtime/speculative/ngram.py",
    "vllm_tvm/runtime/engine/outputs.py",
)
FREE_TOPICS = (
    "Write a short story about a lighthouse keeper who finds a strange map.",
    "Explain to a child why the sky changes colour at sunset.",
)


def copy_prompt(path: str) -> str:
    """The code of `path` (from its imports, 1,200 characters), then the start of a copy."""
    code = (ROOT / path).read_text(encoding="utf-8")
    body = code[code.index("\nfrom ") + 1 :][:1200]
    head = body[: body.index("\nclass ") + 1]
    return f"{body}\n\n# The same code again, copied unchanged:\n\n{head}"


class WrongDrafts:
    """Wraps a proposer: the same number of drafts, every token replaced by the next id."""

    def __init__(self, proposer: Any) -> None:
        self.proposer = proposer

    def propose(self, token_ids: list[int], max_tokens: int) -> list[int]:
        return [token + 1 for token in self.proposer.propose(token_ids, max_tokens)]


def run_arm(llm: LLM, prompt_ids: list[int], params: SamplingParams, speculate: bool):
    """One request through the engine, speculating or not; its output and acceptance."""
    engine = llm.engine
    speculator = engine.speculator
    engine.speculator = speculator if speculate else None
    before = engine.metrics.snapshot()
    try:
        output = llm.generate(prompt_ids, params)[0]
    finally:
        engine.speculator = speculator
    after = engine.metrics.snapshot()
    drafts = after.spec_decode_num_drafts - before.spec_decode_num_drafts
    accepted = after.spec_decode_num_accepted_tokens - before.spec_decode_num_accepted_tokens
    metrics = output.metrics
    return output, {
        "decode_tokens": metrics.decode_tokens,
        "decode_seconds": round(metrics.decode_seconds, 4),
        "decode_tok_s": round(metrics.decode_tokens / metrics.decode_seconds, 3),
        "drafts": drafts,
        "draft_tokens": after.spec_decode_num_draft_tokens - before.spec_decode_num_draft_tokens,
        "accepted_tokens": accepted,
        "mean_acceptance_length": round(1 + accepted / drafts, 3) if drafts else None,
    }


def forward_costs(llm: LLM, repeats: int = 5) -> dict[str, float]:
    """Median milliseconds of the batch-1 decode forward and of ragged prefill forwards of
    1, 3, 5 and 9 tokens after a 300-token context (what verifying 0, 2, 4, 8 drafts
    costs), interleaved; a spare KV sequence of the engine's cache, removed after."""
    runner, kv_id = llm.runner, 7
    runner.kv_cache.add_sequence(kv_id)
    runner.prefill([kv_id], [list(range(100, 400))])
    samples: dict[str, list[float]] = {}
    for _ in range(repeats):
        for count in (0, 1, 3, 5, 9):
            started = time.perf_counter()
            if count == 0:
                runner.decode_logits([kv_id], [5]).argmax()
            else:
                runner.prefill_logits([kv_id], [[5] * count], list(range(count))).argmax()
            elapsed = (time.perf_counter() - started) * 1e3
            runner.kv_cache.popn(kv_id, max(count, 1))
            samples.setdefault("decode" if count == 0 else f"prefill_{count}", []).append(elapsed)
    runner.kv_cache.remove_sequence(kv_id)
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=2, help="A/B pairs per prompt")
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    parser.add_argument("--prompt-lookup-min", type=int, default=2)
    parser.add_argument("--prompt-lookup-max", type=int, default=4)
    parser.add_argument("--workloads", nargs="+", default=["copy", "reject", "free"])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    speculative_config = {
        "method": "ngram",
        "num_speculative_tokens": args.num_speculative_tokens,
        "prompt_lookup_min": args.prompt_lookup_min,
        "prompt_lookup_max": args.prompt_lookup_max,
    }
    load_before = os.getloadavg()
    llm = LLM(default_model_path(), show_progress=False, speculative_config=speculative_config)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    assert llm.tokenizer is not None and llm.engine.speculator is not None
    copy = [llm.tokenizer.encode(copy_prompt(path)) for path in COPY_SOURCES]
    prompts = {
        "copy": copy,
        "reject": copy,
        "free": [llm.chat_prompt_ids([{"role": "user", "content": t}]) for t in FREE_TOPICS],
    }
    ngram = llm.engine.speculator.proposer
    runs: dict[str, list[dict[str, Any]]] = {}
    for workload in args.workloads:
        llm.engine.speculator.proposer = WrongDrafts(ngram) if workload == "reject" else ngram
        for ids in prompts[workload]:
            text = llm.tokenizer.decode(ids)
            llm.generate(ids, SamplingParams(temperature=0.0, max_tokens=4))  # prefix + warm-up
            for pair in range(args.pairs):
                outputs = {}
                for speculate in (True, False) if pair % 2 == 0 else (False, True):
                    output, run = run_arm(llm, ids, params, speculate)
                    outputs[speculate] = output.outputs[0].token_ids
                    run.update(arm="ngram" if speculate else "off", pair=pair, load=os.getloadavg())
                    runs.setdefault(workload, []).append({"prompt": text[-60:], **run})
                    print(workload, run, flush=True)
                if outputs[True] != outputs[False]:
                    raise SystemExit(f"{workload}: speculative tokens differ from plain decoding")
    summary = {}
    for workload, entries in runs.items():
        rate = {
            arm: statistics.median(e["decode_tok_s"] for e in entries if e["arm"] == arm)
            for arm in ("ngram", "off")
        }
        pairs = [
            {a["arm"]: a, b["arm"]: b} for a, b in zip(entries[::2], entries[1::2], strict=True)
        ]
        ratios = [p["ngram"]["decode_tok_s"] / p["off"]["decode_tok_s"] for p in pairs]
        spec = [e for e in entries if e["arm"] == "ngram"]
        drafts = sum(e["drafts"] for e in spec)
        accepted = sum(e["accepted_tokens"] for e in spec)
        summary[workload] = {
            "median_decode_tok_s": rate,
            "speedup_of_medians": round(rate["ngram"] / rate["off"], 3),
            "median_pair_speedup": round(statistics.median(ratios), 3),
            "pair_speedups": [round(r, 3) for r in ratios],
            "mean_acceptance_length": round(1 + accepted / drafts, 3) if drafts else None,
            "draft_tokens": sum(e["draft_tokens"] for e in spec),
            "accepted_tokens": accepted,
        }
        print(workload, summary[workload], flush=True)
    report = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": DEFAULT_MODEL_NAME,
        "conditions": {
            "device": "cpu",
            "batch": 1,
            "greedy": True,
            "max_tokens": args.max_tokens,
            "speculative_config": speculative_config,
            "pairs_per_prompt": args.pairs,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "shared_machine": True,
            "host": host(),
            "versions": versions(),
        },
        "summary": summary,
        "runs": runs,
        "forward_ms": forward_costs(llm),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
