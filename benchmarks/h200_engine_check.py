"""The engine's step on a GPU, checked: every step one forward, batched == sequential, and
greedy tokens equal transformers' on the same weights.

Why this exists: on the CPU the test suite proves that a step mixing prefill chunks and
decode rows runs as ONE ragged `prefill` forward and gives the same tokens as running each
request alone. On CUDA the same step goes through other code (cubins, cuBLASLt for 16-bit
floats, CUDA graphs for decode-only steps), which only a GPU run can check. This script runs
there with a prebuilt artifact and a runtime-only TVM (it never compiles):

    PYTHONPATH=<tvm bundle>:. python3 benchmarks/h200_engine_check.py \
        --model <tiny HF dir> --artifact <cuda artifact> [--artifact <another dtype>] --out r.json

For each artifact: the prompts alone (sequential), then together under a small token budget
(chunked prefill, mixed steps); runner calls are counted per step. For float32 artifacts the
greedy tokens must equal transformers' (fp32, same checkpoint); 16-bit ones report how many
requests agree, since their rounding differs from transformers' by design, and where one
differs, transformers' own top-2 gap there (a near-tie is within the dtype's rounding).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

PROMPT_LENGTHS = (5, 40, 17, 90, 3, 64, 33, 120)
MAX_TOKENS = 24
TOKEN_BUDGET = 48
"""Small enough that the longer prompts prefill in chunks while the short ones decode."""


def prompts(vocab_size: int) -> list[list[int]]:
    """Deterministic token-id prompts of PROMPT_LENGTHS, inside the vocabulary."""
    return [
        [(7 * index + 13 * position + 2) % (vocab_size - 2) + 2 for position in range(length)]
        for index, length in enumerate(PROMPT_LENGTHS)
    ]


def count_forwards(llm: LLM) -> dict[str, Any]:
    """Wrap the runner's two forwards and the engine's step to record runner calls per step."""
    runner, engine = llm.engine.runner, llm.engine
    record: dict[str, Any] = {"steps": 0, "max_calls_in_a_step": 0, "mixed_steps": 0}
    current = {"calls": 0}

    def counted(forward: Any, kind: str) -> Any:
        def call(seq_ids: Any, *args: Any, **kwargs: Any) -> Any:
            current["calls"] += 1
            if kind == "prefill" and len(args) and any(len(chunk) == 1 for chunk in args[0]):
                current["mixed"] = True
            return forward(seq_ids, *args, **kwargs)

        return call

    runner.prefill_logits = counted(runner.prefill_logits, "prefill")
    runner.decode_logits = counted(runner.decode_logits, "decode")
    step = engine.step

    def counted_step() -> Any:
        current.update(calls=0, mixed=False)
        outputs = step()
        if current["calls"]:
            record["steps"] += 1
            record["max_calls_in_a_step"] = max(record["max_calls_in_a_step"], current["calls"])
            record["mixed_steps"] += int(current["mixed"])
        return outputs

    engine.step = counted_step
    return record


def oracle_tokens(
    model_dir: Path, prompt_ids: list[list[int]], device: str
) -> tuple[list[list[int]], list[list[float]]]:
    """transformers' greedy continuation of each prompt, fp32, never stopping at EOS (the
    engine runs with ignore_eos; masking EOS instead would change the argmax), and at every
    position the gap between its two best logits (a 16-bit run may pick the second where
    that gap is within its rounding)."""
    import torch
    from transformers import AutoModelForCausalLM

    # Eager attention: transformers' reference path, the one that applies every score
    # modifier (Gemma 2's soft-cap included) on any device.
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    ).to(device)
    model.eval()
    results, gaps = [], []
    with torch.no_grad():
        for ids in prompt_ids:
            sequence, row_gaps = list(ids), []
            for _ in range(MAX_TOKENS):
                logits = model(torch.tensor([sequence], device=device)).logits[0, -1]
                top = torch.topk(logits, 2).values
                row_gaps.append(float(top[0] - top[1]))
                sequence.append(int(logits.argmax()))
            results.append(sequence[len(ids) :])
            gaps.append(row_gaps)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return results, gaps


def against_oracle(
    tokens: list[list[int]], oracle: list[list[int]], gaps: list[list[float]]
) -> list[dict[str, Any]]:
    """Each request that differs from transformers: where first, and transformers' own top-2
    logit gap there (fp32)."""
    rows = []
    for index, (ours, theirs) in enumerate(zip(tokens, oracle, strict=True)):
        position = next(
            (p for p, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b), None
        )
        if position is not None:
            rows.append(
                {
                    "request": index,
                    "first_difference": position,
                    "fp32_top2_gap": gaps[index][position],
                }
            )
    return rows


def divergence_gaps(
    alone: LLM, together: LLM, prompt_ids: list[list[int]], diverging: list[int]
) -> list[dict[str, Any]]:
    """For each request whose batched tokens differ from its sequential ones: the first
    differing position and, in both runs, the gap between the two best logprobs there (a
    near-tie is a gap of about one rounding step of the dtype). The runs are repeated with
    logprobs (host sampling, same argmax) over the same whole batch, since 16-bit rounding
    depends on the batch's composition."""
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=2)
    batched = together.generate(prompt_ids, params) if diverging else []
    runs = {
        "sequential": [alone.generate([prompt_ids[i]], params)[0].outputs[0] for i in diverging],
        "batched": [batched[i].outputs[0] for i in diverging],
    }
    gaps = []
    for row, index in enumerate(diverging):
        first, second = runs["sequential"][row], runs["batched"][row]
        position = next(
            (
                p
                for p, (a, b) in enumerate(zip(first.token_ids, second.token_ids, strict=True))
                if a != b
            ),
            None,
        )
        entry: dict[str, Any] = {"request": index, "first_difference": position}
        if position is not None:
            for name, output in (("sequential", first), ("batched", second)):
                top = output.logprobs[position].top_logprobs
                entry[f"{name}_top2_gap"] = float(top[0] - top[1])
        gaps.append(entry)
    return gaps


def check_artifact(
    model_dir: Path, artifact: Path, device: str, oracle: tuple[list[list[int]], list[list[float]]]
) -> dict:
    """Sequential and batched greedy runs of one artifact, with the forward counts."""
    manifest = read_manifest(artifact)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    common = {"artifact": artifact, "device": device, "show_progress": False}
    if not any((model_dir / name).exists() for name in ("tokenizer.json", "tokenizer.model")):
        common["skip_tokenizer_init"] = True  # token-id prompts; a random checkpoint has none
    vocab = int(manifest.model_config["vocab_size"])
    prompt_ids = prompts(vocab)
    alone = LLM(model_dir, **common)
    started = time.perf_counter()
    sequential = [alone.generate([ids], params)[0].outputs[0].token_ids for ids in prompt_ids]
    sequential_s = time.perf_counter() - started
    together = LLM(model_dir, max_num_batched_tokens=TOKEN_BUDGET, max_num_seqs=8, **common)
    forwards = count_forwards(together)
    started = time.perf_counter()
    batched = [out.outputs[0].token_ids for out in together.generate(prompt_ids, params)]
    batched_s = time.perf_counter() - started
    diverging = [i for i, (a, b) in enumerate(zip(batched, sequential, strict=True)) if a != b]
    report = {
        "artifact": str(artifact),
        "dtype": manifest.dtype,
        "target": manifest.target,
        "gemm": manifest.gemm,
        "attention": manifest.attention,
        "prompt_lengths": list(PROMPT_LENGTHS),
        "max_tokens": MAX_TOKENS,
        "token_budget": TOKEN_BUDGET,
        "forwards": dict(forwards),
        "one_forward_per_step": forwards["max_calls_in_a_step"] == 1,
        "batched_equals_sequential": batched == sequential,
        "requests_batched_equal_sequential": sum(
            a == b for a, b in zip(batched, sequential, strict=True)
        ),
        "sequential_seconds": round(sequential_s, 3),
        "batched_seconds": round(batched_s, 3),
        "tokens": {"sequential": sequential, "batched": batched},
        "divergences": divergence_gaps(alone, together, prompt_ids, diverging),
    }
    tokens, gaps = oracle
    report["requests_equal_transformers"] = sum(
        a == b for a, b in zip(sequential, tokens, strict=True)
    )
    report["equals_transformers"] = sequential == tokens
    report["differences_from_transformers"] = against_oracle(sequential, tokens, gaps)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="tiny HF checkpoint dir")
    parser.add_argument("--artifact", type=Path, action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", help="cpu for a dry run of the script")
    args = parser.parse_args()
    config = json.loads((args.model / "config.json").read_text())
    oracle = oracle_tokens(args.model, prompts(int(config["vocab_size"])), args.device)
    results = []
    for artifact in args.artifact:
        results.append(check_artifact(args.model, artifact, args.device, oracle))
        results[-1]["transformers_tokens"] = oracle[0]
        print(json.dumps({k: v for k, v in results[-1].items() if "tokens" not in k}))
    import transformers

    report = {"transformers": transformers.__version__, "results": results}
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
