"""Pre-quantized checkpoints on a GPU, checked: the fused dequantizing CUDA kernels give the
tokens and logits of transformers on the dequantized weights.

Why this exists: the CPU tests prove each format's fused kernel (FP8 E4M3, int4 groups of
GPTQ / AWQ / compressed-tensors, NVFP4) against transformers on the weights dequantized by
the formats' reference formulas. On CUDA the same TIR goes through dlight's GPU schedules
and nvcc, which only a GPU run checks. This script runs there with prebuilt float32 CUDA
artifacts and a runtime-only TVM (it never compiles):

    PYTHONPATH=<tvm bundle>:<code> python3 benchmarks/h200_quant_check.py \
        --case NAME QUANTIZED_DIR DEQUANTIZED_DIR ARTIFACT [--case ...] --out r.json

`QUANTIZED_DIR` is the checkpoint as the format stores it, `DEQUANTIZED_DIR` the same model
with every quantized weight replaced by its dequantized fp32 value (transformers' input).

`--bf16-case NAME QUANTIZED DEQUANTIZED ARTIFACT` checks a bfloat16 artifact (e.g. an FP8
checkpoint whose prefill products run on cuBLASLt's FP8 GEMM with per-token FP8 activations,
compiler/fp8_gemm_dispatch.py) against the same fp32 oracle: bf16 rounding and activation
quantization make exact equality the wrong test, so it passes when the prefill logits' largest
error is within BF16_RELATIVE_TOLERANCE of the largest logit, and it reports how many greedy
tokens agree before the first difference and the oracle's top-2 margin there (a near-tie
explains a difference; a wide margin does not).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

PROMPTS = ["Once upon a time", "The quick brown fox jumps over", "Paged attention keeps"]
NEW_TOKENS = 40
LOGIT_TOLERANCE = 1e-4
BF16_RELATIVE_TOLERANCE = 2e-2


def _engine_and_oracle(quantized: Path, dequantized: Path, artifact: Path) -> tuple[Any, Any]:
    """Our engine on the CUDA artifact, and transformers (fp32, GPU) on the dequantized model."""
    import torch
    import transformers

    from vllm_tvm.entrypoints.llm import LLM

    llm = LLM(quantized, artifact=artifact, device="cuda", show_progress=False)
    oracle = transformers.AutoModelForCausalLM.from_pretrained(
        dequantized, dtype=torch.float32
    ).cuda()
    return llm, oracle.eval()


def _logits(llm: Any, oracle: Any, ids: list[int]) -> tuple[Any, Any]:
    """Prefill logits of `ids` at every position: ours, then the oracle's (numpy, fp32)."""
    import torch

    llm.runner.kv_cache.add_sequence(1)
    try:
        logits = llm.runner.prefill([1], [ids], logit_positions=range(len(ids)))
    finally:
        llm.runner.kv_cache.remove_sequence(1)
    with torch.no_grad():
        expected = oracle(torch.tensor([ids]).cuda()).logits[0].float().cpu().numpy()
    return logits, expected


def check_case(quantized: Path, dequantized: Path, artifact: Path) -> dict[str, Any]:
    """Greedy tokens and prefill logits of our CUDA engine against transformers (fp32, GPU)."""
    import numpy as np
    import torch

    from vllm_tvm.runtime.sampling.params import SamplingParams

    llm, oracle = _engine_and_oracle(quantized, dequantized, artifact)
    formats = sorted({p.format for p in llm.runner.manifest.params})
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    logits, expected = _logits(llm, oracle, llm.tokenizer.encode(PROMPTS[2]))
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    equal = []
    for output in llm.generate(PROMPTS, params):
        prompt = torch.tensor([output.prompt_token_ids]).cuda()
        with torch.no_grad():
            out = oracle.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
        equal.append(output.outputs[0].token_ids == out[0, prompt.shape[1] :].tolist())
    max_diff = float(np.abs(logits - expected).max())
    return {
        "formats": formats,
        "target": llm.runner.manifest.target,
        "dtype": llm.runner.manifest.dtype,
        "prefill_logits_max_abs_diff": max_diff,
        "logits_within_tolerance": max_diff <= LOGIT_TOLERANCE,
        "greedy_equal_per_prompt": equal,
        "passed": max_diff <= LOGIT_TOLERANCE and all(equal),
    }


def fake_quantize_projection_inputs(oracle: Any) -> None:
    """Make every `*_proj` linear of `oracle` see its input rounded as the FP8 GEMM path
    rounds it: per token, scale amax / 448, E4M3 round-to-nearest-even (torch's cast)."""
    import torch

    def hook(_module: Any, inputs: tuple) -> tuple:
        x = inputs[0]
        scale = x.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 448.0
        codes = (x.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return (codes.float() * scale).to(x.dtype), *inputs[1:]

    for name, module in oracle.named_modules():
        if name.endswith("_proj") and isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(hook)


def check_bf16_case(
    quantized: Path, dequantized: Path, artifact: Path, fp8_activations: bool = False
) -> dict[str, Any]:
    """A bf16 artifact against the fp32 oracle: relative logit error and greedy agreement.
    `fp8_activations`: the oracle rounds projection inputs to FP8 per token as well."""
    import numpy as np
    import torch

    from vllm_tvm.runtime.sampling.params import SamplingParams

    llm, oracle = _engine_and_oracle(quantized, dequantized, artifact)
    ids = llm.tokenizer.encode(PROMPTS[2])
    with torch.no_grad():
        unrounded = oracle(torch.tensor([ids]).cuda()).logits[0].float().cpu().numpy()
    if fp8_activations:
        fake_quantize_projection_inputs(oracle)
    logits, expected = _logits(llm, oracle, ids)
    relative = float(np.abs(logits - expected).max() / np.abs(expected).max())
    # How far the oracle's own FP8 rounding moves its logits: the size of the effect itself.
    rounding_alone = float(np.abs(expected - unrounded).max() / np.abs(unrounded).max())
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    agreement = []
    for output in llm.generate(PROMPTS, params):
        ours = list(output.outputs[0].token_ids)
        sequence = list(output.prompt_token_ids)
        same, margin = 0, None
        for token in ours:
            with torch.no_grad():
                row = oracle(torch.tensor([sequence]).cuda()).logits[0, -1].float()
            top = torch.topk(row, 2)
            if int(top.indices[0]) != token:
                margin = float(top.values[0] - top.values[1])
                break
            same += 1
            sequence.append(token)
        agreement.append({"equal_tokens_before_first_difference": same, "oracle_margin": margin})
    return {
        "extensions": llm.runner.manifest.extensions,
        "dtype": llm.runner.manifest.dtype,
        "oracle_rounds_projection_inputs_to_fp8": fp8_activations,
        "prefill_logits_max_relative_error": relative,
        "oracle_fp8_rounding_alone_relative_change": rounding_alone,
        "greedy_agreement": agreement,
        "passed": relative <= BF16_RELATIVE_TOLERANCE,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, text in (
        ("--case", "an fp32 artifact: tokens and logits equal the oracle's"),
        ("--bf16-case", "a bf16 artifact: relative logit error and greedy agreement"),
        ("--fp8-activation-case", "as --bf16-case, the oracle rounding projection inputs to FP8"),
    ):
        parser.add_argument(
            flag,
            nargs=4,
            action="append",
            default=[],
            metavar=("NAME", "QUANTIZED", "DEQUANTIZED", "ARTIFACT"),
            help=text,
        )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    results: dict[str, Any] = {
        "script": "benchmarks/h200_quant_check.py",
        "device": torch.cuda.get_device_name(0),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "new_tokens": NEW_TOKENS,
        "logit_tolerance": LOGIT_TOLERANCE,
        "bf16_relative_tolerance": BF16_RELATIVE_TOLERANCE,
        "cases": {},
    }
    for name, quantized, dequantized, artifact in args.case:
        results["cases"][name] = check_case(Path(quantized), Path(dequantized), Path(artifact))
        print(name, json.dumps(results["cases"][name]), flush=True)
    bf16_cases = [(case, False) for case in args.bf16_case]
    bf16_cases += [(case, True) for case in args.fp8_activation_case]
    for (name, quantized, dequantized, artifact), fp8_activations in bf16_cases:
        results["cases"][name] = check_bf16_case(
            Path(quantized), Path(dequantized), Path(artifact), fp8_activations
        )
        print(name, json.dumps(results["cases"][name]), flush=True)
    args.out.write_text(json.dumps(results, indent=2))
    return 0 if all(case["passed"] for case in results["cases"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
