"""On a GPU: the hybrid engine (Gated DeltaNet + gated attention) against transformers at a
real layer shape: greedy tokens and prefill / decode speed.

Why this exists: the CPU suite proves the hybrid engine token-exact in fp32; on CUDA the
same model runs as sm_90a kernels in bf16, which only a GPU run can check. This runs with a
runtime-only TVM and a prebuilt artifact (it never compiles), on a random checkpoint that
benchmarks/random_hf_checkpoint.py writes there (Qwen3.6-27B's layer shapes: hidden 5120,
16 key / 48 value linear heads of 128, 24 query / 4 KV heads of 256, FFN 17408; few layers):

    PYTHONPATH=<tvm bundle>:.:benchmarks python3 benchmarks/h200_hybrid_engine_check.py \
        --model <random HF dir> --artifact <cuda artifact> --out r.json

Tokens: h200_engine_check.py's check (ours alone and batched under a small token budget,
against transformers fp32 with its top-2 gap where they differ), and transformers' own bf16
greedy beside ours. Speed: one prompt's prefill and its decode steps, ours and transformers'
bf16 (its torch path for the delta rule unless a fused kernel library is installed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from h200_engine_check import MAX_TOKENS, check_artifact, oracle_tokens, prompts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from transformers_greedy import greedy_tokens

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

PREFILL_TOKENS = 2048
DECODE_TOKENS = 128


def _transformers_bf16(model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()


def _timed(run: Any) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def _speed(prefill: Any, decode: Any) -> dict[str, float]:
    """Seconds of a prefill (first token) and per decode token (the rest), after a warm-up."""
    prefill(), decode()
    prefill_s = _timed(prefill)
    total_s = _timed(decode)
    return {
        "prefill_s": round(prefill_s, 4),
        "prefill_tokens_per_s": round(PREFILL_TOKENS / prefill_s, 1),
        "decode_ms_per_token": round(1000 * (total_s - prefill_s) / DECODE_TOKENS, 3),
    }


def _transformers_speed(model: Any, prompt: list[int]) -> dict[str, float]:
    return _speed(
        lambda: greedy_tokens(model, prompt, 1),
        lambda: greedy_tokens(model, prompt, DECODE_TOKENS + 1),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    config = json.loads((args.model / "config.json").read_text())
    prompt_ids = prompts(int(config["vocab_size"]))
    report: dict[str, Any] = {"config": config, "gpu": torch.cuda.get_device_name()}
    oracle = oracle_tokens(args.model, prompt_ids, "cuda")
    report["engine"] = check_artifact(args.model, args.artifact, "cuda", oracle)
    print(json.dumps({k: v for k, v in report["engine"].items() if "tokens" not in k}))

    hf = _transformers_bf16(args.model)
    bf16 = [greedy_tokens(hf, ids, MAX_TOKENS) for ids in prompt_ids]
    ours = report["engine"]["tokens"]["sequential"]
    report["transformers_bf16_tokens"] = bf16
    report["requests_equal_transformers_bf16"] = sum(
        a == b for a, b in zip(ours, bf16, strict=True)
    )
    report["transformers_bf16_equal_fp32"] = sum(
        a == b for a, b in zip(bf16, oracle[0], strict=True)
    )

    long_prompt = [(7 * i + 3) % (int(config["vocab_size"]) - 2) + 2 for i in range(PREFILL_TOKENS)]
    report["speed_transformers_bf16"] = _transformers_speed(hf, long_prompt)
    del hf
    torch.cuda.empty_cache()
    llm = LLM(
        args.model,
        artifact=args.artifact,
        device="cuda",
        show_progress=False,
        skip_tokenizer_init=True,
        max_model_len=4096,
    )

    def ours_run(tokens: int) -> None:
        params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
        llm.generate([long_prompt], params)

    report["speed_ours_bf16"] = _speed(lambda: ours_run(1), lambda: ours_run(DECODE_TOKENS + 1))
    report["conditions"] = {
        "prefill_tokens": PREFILL_TOKENS,
        "decode_tokens": DECODE_TOKENS,
        "batch": 1,
        "weights": "random (transformers' initialisation), bf16 checkpoint",
        "torch": torch.__version__,
    }
    print(json.dumps({k: v for k, v in report.items() if k not in ("engine", "config")}))
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
