"""Expert (MoE) and latent-attention (MLA) models on a GPU, checked against transformers.

Why this exists: on the CPU the test suite proves the tiny Qwen3-MoE, Mixtral and
DeepSeek-V3 models token-exact. On CUDA their expert products run other kernels (the warp
gather-GEMV of decode and the row-grouped prefill tiles of schedules/gpu_expert.py, GPU
top-k / argsort) and DeepSeek's cache runs TVM's TIR MLA kernels, which only a GPU run can
check. This script runs there with prebuilt artifacts and a runtime-only TVM; it builds
nothing. The artifacts and checkpoints are built on the build machine (nvcc, no GPU) with

    PYTHONPATH=. .venv/bin/python scripts/build_moe_cuda_artifacts.py --out .device/moe

which writes `.device/moe/<model>/model/` (the tiny random HF checkpoint) and
`.device/moe/<model>/{float32,bfloat16}/` (sm_90a artifacts). Then, on the GPU box:

    PYTHONPATH=<tvm bundle>:. python3 benchmarks/h200_moe_check.py --root .device/moe --out r.json

Per artifact: greedy tokens of 8 prompts run alone and batched under a small token budget
(h200_engine_check.py's run: batched == sequential, one forward per step); float32 greedy
tokens must equal transformers' (fp32, same weights, on the GPU); the prefill logits of one
prompt at every position against transformers' (max |diff|; float32 within LOGIT_TOLERANCE).
"""

from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path
from typing import Any

from h200_engine_check import check_artifact, oracle_tokens, prompts

MODEL_DIR = "model"
"""The checkpoint folder beside the artifacts (scripts/build_moe_cuda_artifacts.py)."""
LOGIT_TOLERANCE = 1e-4
"""fp32 logits of ours and transformers' agree within this (the project's oracle rule)."""
LOGIT_PROMPT = 1
"""Index of the prompt (of h200_engine_check.prompts) whose prefill logits are compared."""


def logit_difference(model_dir: Path, artifact: Path, device: str) -> float:
    """max |ours - transformers'| over the prefill logits of one prompt, every position."""
    import numpy as np
    import torch
    import transformers

    from vllm_tvm.entrypoints.llm import LLM

    llm = LLM(model_dir, artifact=artifact, device=device, show_progress=False)
    ids = prompts(llm.runner.vocab_size)[LOGIT_PROMPT]
    llm.runner.kv_cache.add_sequence(1)
    try:
        ours = llm.runner.prefill([1], [ids], logit_positions=range(len(ids)))
    finally:
        llm.runner.kv_cache.remove_sequence(1)
    oracle = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    oracle = oracle.to(device).eval()
    with torch.no_grad():
        expected = oracle(torch.tensor([ids], device=device)).logits[0].float().cpu().numpy()
    return float(
        np.abs(np.asarray(ours, dtype=np.float32).reshape(expected.shape) - expected).max()
    )


def check_model(model_folder: Path, device: str) -> list[dict[str, Any]]:
    """Every artifact beside `model_folder/model`, against transformers on that checkpoint."""
    model_dir = model_folder / MODEL_DIR
    config = json.loads((model_dir / "config.json").read_text())
    oracle = oracle_tokens(model_dir, prompts(int(config["vocab_size"])), device)
    reports = []
    for artifact in sorted(p for p in model_folder.iterdir() if (p / "manifest.json").exists()):
        fp32 = artifact.name == "float32"
        report: dict[str, Any] = {"model": model_folder.name, "artifact": str(artifact)}
        try:
            report.update(check_artifact(model_dir, artifact, device, oracle if fp32 else None))
            diff = logit_difference(model_dir, artifact, device)
            report["max_logit_difference"] = diff
            if fp32:
                report["logits_within_tolerance"] = diff <= LOGIT_TOLERANCE
        except Exception:  # one broken artifact must not hide the others' results
            report["error"] = traceback.format_exc()
        report["transformers_tokens"] = oracle
        reports.append(report)
        print(json.dumps({k: v for k, v in report.items() if "tokens" not in k}), flush=True)
    return reports


def passed(report: dict[str, Any]) -> bool:
    """No error, batched == sequential, and (float32) tokens and logits equal transformers'."""
    if "error" in report or not report["batched_equals_sequential"]:
        return False
    return report.get("equals_transformers", True) and report.get("logits_within_tolerance", True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(".device/moe"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", help="cpu for a dry run (llvm artifacts)")
    args = parser.parse_args(argv)
    folders = sorted(p for p in args.root.iterdir() if (p / MODEL_DIR).is_dir())
    results = [report for folder in folders for report in check_model(folder, args.device)]
    summary = {"all_passed": bool(results) and all(map(passed, results)), "results": results}
    args.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps({"all_passed": summary["all_passed"], "artifacts": len(results)}))
    return 0 if summary["all_passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
