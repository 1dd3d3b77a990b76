"""On a CUDA machine: the owned-page prefill with FlashInfer's ragged kernel (an artifact built
with `--attention flashinfer --owned-kv`) against the FlashInfer cache path (the same build
without `--owned-kv`) and against HF transformers in fp32 on the same tiny checkpoint.

bf16 only (FlashInfer serves 16-bit types), so tokens may part at near-ties: the report gives
each path's last-token prefill logits against fp32 transformers (max abs, relative L2) for a
fresh prompt, a prompt in two chunks (its second chunk: FlashInfer over its own rows merged
with TIR over its cached ones) and a mixed step; then greedy tokens of five prompts batched,
and where a path parts from transformers, transformers' top-2 gap there.

usage (artifacts built elsewhere, the runtime-only TVM bundle on PYTHONPATH):
  python3 benchmarks/h200_owned_flashinfer_check.py --model CHECKPOINT
      --owned-artifact A --cache-artifact B --out FILE.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from h200_owned_decode import NEW_TOKENS, PROMPTS
from transformers import AutoModelForCausalLM

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams


def _logit_cases(llm: LLM) -> dict[str, np.ndarray]:
    """Last-token logits: a fresh prompt; a prompt's second chunk over its first; a mixed
    step (a fresh prompt beside one token of a sequence with the rest cached)."""
    runner, encode = llm.runner, llm.tokenizer.encode
    fresh, cached, chunked = encode(PROMPTS[0]), encode(PROMPTS[1]), encode(PROMPTS[2]) * 2
    cases: dict[str, np.ndarray] = {}
    for seq_id in (1, 2, 3, 4):
        runner.kv_cache.add_sequence(seq_id)
    try:
        cases["fresh"] = runner.prefill_logits([1], [fresh]).numpy()[-1]
        runner.prefill_logits([2], [chunked[:7]])
        cases["second_chunk"] = runner.prefill_logits([2], [chunked[7:]]).numpy()[-1]
        runner.prefill_logits([3], [cached[:-1]])
        mixed = runner.prefill_logits([3, 4], [cached[-1:], fresh]).numpy()
        cases["mixed_decode_row"], cases["mixed_prompt_row"] = mixed[0], mixed[1]
    finally:
        for seq_id in (1, 2, 3, 4):
            runner.kv_cache.remove_sequence(seq_id)
    return cases


def _paths(model: Path, artifact: Path) -> dict[str, Any]:
    llm = LLM(model, artifact=str(artifact), device="cuda", show_progress=False)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    result = {
        "cache_class": type(llm.runner.kv_cache).__name__,
        "logits": _logit_cases(llm),
        "tokens": [out.outputs[0].token_ids for out in llm.generate(PROMPTS, params)],
        "prompts": [llm.tokenizer.encode(prompt) for prompt in PROMPTS],
    }
    del llm
    return result


def _oracle(model: Path, prompts: list[list[int]]) -> tuple[dict[str, np.ndarray], Any]:
    oracle = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    with torch.no_grad():

        def last(ids: list[int]) -> np.ndarray:
            return oracle(torch.tensor([ids])).logits[0, -1].numpy()

        logits = {
            "fresh": last(prompts[0]),
            "second_chunk": last(prompts[2] * 2),
            "mixed_decode_row": last(prompts[1]),
            "mixed_prompt_row": last(prompts[0]),
        }
    return logits, oracle


def _divergence(oracle: Any, prompt: list[int], ours: list[int], theirs: list[int]) -> Any:
    """None when equal, else the first parting position and transformers' top-2 gap there
    (on its own prefix, so both paths saw the same tokens before it)."""
    if ours == theirs:
        return None
    at = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
    with torch.no_grad():
        logits = oracle(torch.tensor([prompt + theirs[:at]])).logits[0, -1]
    top = torch.topk(logits, 2).values
    return {"position": at, "transformers_top2_gap": float(top[0] - top[1])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--owned-artifact", type=Path, required=True)
    parser.add_argument("--cache-artifact", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    owned = _paths(args.model, args.owned_artifact)
    cache = _paths(args.model, args.cache_artifact)
    assert owned["cache_class"] == "OwnedKVCache" != cache["cache_class"]
    reference, oracle = _oracle(args.model, owned["prompts"])
    expected = []
    with torch.no_grad():
        for ids in owned["prompts"]:
            out = oracle.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
            expected.append(out[0, len(ids) :].tolist())
    report: dict[str, Any] = {
        "conditions": {
            "device": torch.cuda.get_device_name(0),
            "engine_dtype": "bfloat16",
            "oracle": "transformers float32 on the same checkpoint",
            "prompts": len(PROMPTS),
            "new_tokens": NEW_TOKENS,
        },
        "logits_vs_transformers_fp32": {},
        "owned_tokens_equal_cache_path": owned["tokens"] == cache["tokens"],
    }
    for name, path in (("owned", owned), ("cache", cache)):
        for case, theirs in reference.items():
            ours = path["logits"][case].astype(np.float64)
            report["logits_vs_transformers_fp32"][f"{name}/{case}"] = {
                "max_abs": float(np.abs(ours - theirs).max()),
                "rel_l2": float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)),
                "argmax_equal": int(ours.argmax()) == int(theirs.argmax()),
            }
        report[f"{name}_divergences_from_transformers"] = [
            _divergence(oracle, prompt, ours, theirs)
            for prompt, ours, theirs in zip(owned["prompts"], path["tokens"], expected, strict=True)
        ]
        report[f"{name}_tokens"] = path["tokens"]
    report["transformers_tokens"] = expected
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if not k.endswith("tokens")}, indent=1))


if __name__ == "__main__":
    main()
