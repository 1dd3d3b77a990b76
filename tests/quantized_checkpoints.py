"""Shared by the quantized-checkpoint tests: a tiny fp32 checkpoint rewritten in a format, and
our engine compared with transformers on the weights the format dequantizes to.

Each format's test supplies only its quantizer (weight -> the tensors the format stores
beside or instead of `.weight`, and the dequantized fp32 weight, both written from the
format's public description); the comparison is the same for all: prefill logits within
1e-4 and greedy 40 tokens x 3 prompts equal.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tiny_models import load_oracle

from vllm_tvm.entrypoints.llm import LLM
from vllm_tvm.runtime.sampling.params import SamplingParams

PROMPTS = ["Once upon a time", "The quick brown fox jumps over", "Paged attention keeps"]
NEW_TOKENS = 40
LOGIT_TOLERANCE = 1e-4

Quantizer = Callable[[np.ndarray], tuple[dict[str, Any], np.ndarray]]
"""fp32 weight [out, in] -> ({suffix: stored tensor}, dequantized fp32 weight); a suffix
replaces the trailing `weight` of the tensor's name (`weight`, `weight_scale`, `qzeros`...)."""


def is_projection(name: str) -> bool:
    """Whether HF tensor `name` is an attention or MLP projection weight."""
    return name.endswith("proj.weight")


def rewrite_checkpoint(
    float_dir: Path,
    dest: Path,
    quantization_config: dict[str, Any],
    quantize: Quantizer,
    selects: Callable[[str], bool] = is_projection,
) -> dict[str, np.ndarray]:
    """A copy of `float_dir` whose weights that `selects` names `quantize` stored, its config
    carrying `quantization_config`; returns the dequantized weights by HF name (the
    oracle's)."""
    shutil.copytree(float_dir, dest)
    config = json.loads((dest / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (dest / "config.json").write_text(json.dumps(config))
    tensors: dict[str, torch.Tensor] = {}
    dequantized: dict[str, np.ndarray] = {}
    for path in dest.glob("*.safetensors"):
        for name, weight in load_file(path).items():
            if not selects(name):
                tensors[name] = weight
                continue
            parts, dequantized[name] = quantize(weight.float().numpy())
            prefix = name.removesuffix("weight")
            for suffix, value in parts.items():
                stored = value if isinstance(value, torch.Tensor) else torch.from_numpy(value)
                tensors[prefix + suffix] = stored.contiguous()
        path.unlink()
    save_file(tensors, dest / "model.safetensors")
    return dequantized


def dequantized_oracle(float_dir: Path, dequantized: dict[str, np.ndarray]) -> Any:
    """transformers' fp32 model of `float_dir` with `dequantized` weights put in."""
    oracle = load_oracle(float_dir)
    state = oracle.state_dict()
    with torch.no_grad():
        for name, weight in dequantized.items():
            state[name].copy_(torch.as_tensor(weight))
    return oracle


def prefill_logits(llm: LLM, ids: list[int]) -> np.ndarray:
    """Our fp32 logits at every position of `ids`, in a sequence of their own (a hybrid
    model's recurrent state in slot 0, zeroed first, as the engine hands a slot out)."""
    runner = llm.runner
    slots = None
    pool = getattr(runner, "recurrent_pool", None)
    if pool is not None:
        pool.zero_slot(0)
        slots = [0]
    runner.kv_cache.add_sequence(99)
    try:
        positions = range(len(ids))
        return runner.prefill_logits([99], [ids], positions, recurrent_slots=slots).numpy()
    finally:
        runner.kv_cache.remove_sequence(99)


def assert_equals_oracle(
    llm: LLM, oracle: Any, encode: Callable[[str], list[int]] | None = None
) -> None:
    """Prefill logits within LOGIT_TOLERANCE and greedy NEW_TOKENS x PROMPTS equal; with
    `encode`, prompts go in as its token ids (an engine without a tokenizer)."""
    prompts: list[Any] = list(PROMPTS) if encode is None else [encode(p) for p in PROMPTS]
    ids = (encode or llm.tokenizer.encode)(PROMPTS[2])
    with torch.no_grad():
        expected = oracle(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(prefill_logits(llm, ids) - expected).max() <= LOGIT_TOLERANCE
    oracle.generation_config.eos_token_id = None
    oracle.generation_config.pad_token_id = 0
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    for output in llm.generate(prompts, params):
        prompt = torch.tensor([output.prompt_token_ids])
        with torch.no_grad():
            out = oracle.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
        assert output.outputs[0].token_ids == out[0, prompt.shape[1] :].tolist()
