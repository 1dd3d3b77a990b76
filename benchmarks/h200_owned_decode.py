"""On a CUDA machine: greedy tokens of the model's forwards over owned KV pages
(`prefill_owned` / `decode_owned`, one CUDA graph a decode step) against the artifact built
without them (TVM's paged KV cache) and against HF transformers, on a tiny fp32 checkpoint
with real weights. The speed of the two paths is taken at engine level by
benchmarks/engine_decode.py, run once on each artifact.

usage (artifacts built elsewhere with `vllm-tvm compile MODEL --target cuda:sm_90a
--dtype float32 [--owned-kv]`, the runtime-only TVM bundle on PYTHONPATH):
  python3 benchmarks/h200_owned_decode.py --model CHECKPOINT --owned-artifact A
      --cache-artifact B --out FILE.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.kv.owned_kv_cache import OwnedKVCache
from vllm_tvm.runtime.sampling.params import SamplingParams

PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over",
    "Beautiful is better than ugly. Explicit is better than implicit.",
    "Simple is better than complex.",
    "Readability counts.",
]
NEW_TOKENS = 40


def _engine_tokens(
    model: Path, artifact: Path, device: str
) -> tuple[str, list[list[int]], list[list[int]]]:
    """The cache class used, the greedy tokens of every prompt (batched in one `generate`)
    and the prompts' ids."""
    llm = LLM(model, artifact=str(artifact), device=device, show_progress=False)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    tokens = [out.outputs[0].token_ids for out in llm.generate(PROMPTS, params)]
    cache = type(llm.runner.kv_cache).__name__
    prompts = [llm.tokenizer.encode(prompt) for prompt in PROMPTS]
    del llm
    return cache, tokens, prompts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--owned-artifact", type=Path, required=True)
    parser.add_argument("--cache-artifact", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    owned_cache, owned, prompts = _engine_tokens(args.model, args.owned_artifact, args.device)
    cache_cache, cached, _ = _engine_tokens(args.model, args.cache_artifact, args.device)
    assert owned_cache == OwnedKVCache.__name__ and cache_cache != owned_cache
    oracle = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    expected = []
    with torch.no_grad():
        for ids in prompts:
            out = oracle.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
            expected.append(out[0, len(ids) :].tolist())
    report = {
        "conditions": {
            "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
            "dtype": "float32",
            "prompts": len(PROMPTS),
            "new_tokens": NEW_TOKENS,
            "batched": "all prompts in one generate: decode steps of 5 rows, bucket 8",
        },
        "owned_equals_cache_path": owned == cached,
        "owned_equals_transformers": owned == expected,
        "cache_path_equals_transformers": cached == expected,
        "owned_tokens": owned,
        "cache_path_tokens": cached,
        "transformers_tokens": expected,
    }
    args.out.write_text(json.dumps(report, indent=1))
    print({key: value for key, value in report.items() if key.endswith(("path", "formers"))})


if __name__ == "__main__":
    main()
