"""On a CUDA machine: speculative methods `eagle` and `mtp` on prebuilt sm_90a artifacts (no
compile): greedy tokens with the head equal the plain greedy tokens of the same target
artifact, batched; the drafts and accepted tokens counted.

Why: on the CPU the tests prove the heads exact; on CUDA the target's hidden-states function
and the heads' artifacts run other code (cubins, cuBLASLt for 16-bit floats), which only a GPU
run checks. Two heads per method: a random one (few drafts accepted) and an "echo" head over a
target rigged to repeat its last token (every draft accepted).

Layout (made on the build machine from the tests' tiny checkpoints): <root>/{llama,rep,head,
echo,ds,dsrep}/ checkpoints and <root>/art_{target,head,dstarget,mtp}_<dtype>/ artifacts.

usage: PYTHONPATH=<tvm bundle>:. python3 benchmarks/h200_spec_heads_check.py --root R --out F
"""

import argparse
import json
import traceback
from pathlib import Path

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams
from vllm_tvm.runtime.speculative.config import SpeculativeConfig

PROMPTS = [
    [5 + (7 * i + j) % 300 for j in range(n)] for i, n in enumerate([3, 70, 9, 41, 17, 1, 64, 28])
]


def run(
    root: Path,
    device: str,
    dtype: str,
    method: str,
    model: str,
    target: str,
    head_model: str,
    head: str,
) -> dict:
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    common = {"device": device, "show_progress": False, "skip_tokenizer_init": True}
    target_art = root / f"art_{target}_{dtype}"
    plain = LLM(root / model, artifact=str(target_art), **common)
    expected = [o.outputs[0].token_ids for o in plain.generate(PROMPTS, params)]
    del plain
    spec = SpeculativeConfig(
        method, 3, model=str(root / head_model), draft_artifact=str(root / f"art_{head}_{dtype}")
    )
    llm = LLM(root / model, artifact=str(target_art), speculative_config=spec, **common)
    got = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params)]
    stats = llm.engine.metrics.snapshot()
    return {
        "method": method,
        "model": model,
        "head": head_model,
        "dtype": dtype,
        "equal": got == expected,
        "rows_equal": sum(a == b for a, b in zip(got, expected, strict=True)),
        "drafts": stats.spec_decode_num_drafts,
        "draft_tokens": stats.spec_decode_num_draft_tokens,
        "accepted": stats.spec_decode_num_accepted_tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, default=Path(".device/spec_heads"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    results = []
    for dtype in ("float32", "bfloat16"):
        for method, model, target, head_model, head in (
            ("eagle", "llama", "target", "head", "head"),
            ("eagle", "rep", "target", "echo", "head"),  # every draft accepted
            ("mtp", "ds", "dstarget", "ds", "mtp"),
            ("mtp", "dsrep", "dstarget", "dsrep", "mtp"),  # every draft accepted
        ):
            if not (args.root / f"art_{target}_{dtype}").is_dir():
                continue
            try:
                results.append(
                    run(args.root, args.device, dtype, method, model, target, head_model, head)
                )
            except Exception:
                results.append(
                    {
                        "method": method,
                        "model": model,
                        "dtype": dtype,
                        "error": traceback.format_exc()[-3000:],
                    }
                )
            print(json.dumps(results[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
