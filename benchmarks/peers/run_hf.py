"""On the GPU box: HF transformers on the Llama-3.1-8B shape with random bf16 weights — b1
decode and TTFT@1024, with a static KV cache and transformers' own torch.compile, as JSON.

Why: the plain-PyTorch baseline every engine is measured against, in the same run as the
others. The model is built on the meta device and materialised on the GPU (`to_empty` +
`normal_`: seconds, no host copy); the rotary embedding, whose buffers are computed at
construction, is rebuilt on the GPU.

How it runs, as transformers documents for speed: `generate` with a `StaticCache` (what
`cache_implementation="static"` makes), sdpa attention, greedy, no EOS. With a static cache,
`generate` compiles the decode step itself (`mode="reduce-overhead"`: CUDA graphs,
`dynamic=False`); the prefill runs eagerly. One cache object per prompt length is passed in
and reset between calls: `cache_implementation="static"` would make a new cache (new tensor
addresses) on every call, and the compiled step would re-record its CUDA graphs each time.

Definitions (wall clock around one `generate` call, median of 5):
  decode_b1_tok_s        (N-1) / (t(prompt 128, out N) - t(prompt 128, out 1)), N = 257
  ttft_1024_ms_median    t(prompt 1024, out 1) (eager prefill + first token)

usage: python3 benchmarks/peers/run_hf.py --out $OUT/hf.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from llama31_8b import LLAMA_31_8B, LlamaShape, config_json, write_config_dir
from peer_report import finish, record_error, save
from result_conditions import EACH_BATCH, model_shape, record_workload

B1_PROMPT, B1_OUT = 128, 257
TTFT_PROMPT = 1024


def build_random_model(shape: LlamaShape, device: str, seed: int = 0):
    """A bf16 LlamaForCausalLM with N(0, 0.02) matrices and unit norms, made on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(write_config_dir(Path(tempfile.mkdtemp()), shape))
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model = model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=generator)
    with torch.device(device):
        model.model.rotary_emb = type(model.model.rotary_emb)(model.config)
    model.generation_config.eos_token_id = None  # fixed lengths: never stop early
    model.generation_config.pad_token_id = 0
    return model.eval()


def synchronize(device) -> None:
    """Wait for the GPU (a no-op on the CPU, where the harness is tested)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Generator:
    """`generate` with one reusable StaticCache, timed, checking the output length."""

    def __init__(self, model, max_cache_len: int) -> None:
        from transformers import StaticCache

        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=max_cache_len)

    def __call__(self, prompt, new_tokens: int) -> float:
        import torch

        self.cache.reset()
        synchronize(prompt.device)
        start = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                past_key_values=self.cache,
                max_new_tokens=new_tokens,
                do_sample=False,
            )
        synchronize(prompt.device)
        elapsed = time.perf_counter() - start
        if out.shape[1] != prompt.shape[1] + new_tokens:
            made = out.shape[1] - prompt.shape[1]
            raise RuntimeError(f"expected {new_tokens} new tokens, got {made}")
        return elapsed


def measure(model, report: dict, save: Callable[[], None]) -> None:
    """b1 decode (compiles on first use), then TTFT@1024; `save()` after each."""
    import torch

    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size

    def prompt(length: int):
        ids = torch.randint(vocab // 8, vocab - vocab // 8, (1, length), generator=generator)
        return ids.to(model.device)

    decode = Generator(model, B1_PROMPT + B1_OUT)
    start = time.perf_counter()
    decode(prompt(B1_PROMPT), B1_OUT)  # torch.compile of the decode step + CUDA graph capture
    report["compile_and_first_call_s"] = time.perf_counter() - start
    print(f"compiled in {report['compile_and_first_call_s']:.0f} s", flush=True)
    decode(prompt(B1_PROMPT), B1_OUT)
    decode(prompt(B1_PROMPT), 1)
    t1 = [decode(prompt(B1_PROMPT), 1) for _ in range(5)]
    tn = [decode(prompt(B1_PROMPT), B1_OUT) for _ in range(5)]
    step = (statistics.median(tn) - statistics.median(t1)) / (B1_OUT - 1)
    report["decode_b1_tok_s"] = 1.0 / step
    report["decode_b1_ms_per_step"] = step * 1e3
    record_workload(report, "decode_b1_tok_s", B1_PROMPT, B1_OUT, 1)
    report["raw"] |= {"b1_out1_s": t1, f"b1_out{B1_OUT}_s": tn}
    print(f"b1 decode: {1 / step:.1f} tok/s ({step * 1e3:.3f} ms/step)", flush=True)
    save()

    ttft = Generator(model, TTFT_PROMPT + 1)
    for _ in range(2):
        ttft(prompt(TTFT_PROMPT), 1)
    times = [ttft(prompt(TTFT_PROMPT), 1) for _ in range(5)]
    report[f"ttft_{TTFT_PROMPT}_ms_median"] = statistics.median(times) * 1e3
    record_workload(report, f"ttft_{TTFT_PROMPT}_ms_median", TTFT_PROMPT, 1, 1)
    report["raw"][f"ttft_{TTFT_PROMPT}_s"] = times
    print(f"TTFT@{TTFT_PROMPT}: {statistics.median(times) * 1e3:.2f} ms", flush=True)
    save()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report: dict = {
        "engine": "hf",
        "shape": config_json(),
        # `generate` with its sampling and stopping is HF's engine; every call is batch 1,
        # and each prompt length runs untimed before it is timed.
        "conditions": {
            "level": "engine",
            "dtype": "bfloat16",
            "shape": model_shape(config_json()),
            "warmup": EACH_BATCH,
        },
        "raw": {},
        "definitions": __doc__.split("Definitions")[1].split("usage:")[0].strip(),
        "loadavg_start": os.getloadavg(),
    }
    try:
        import torch
        import transformers

        report |= {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(),
        }
        start = time.perf_counter()
        model = build_random_model(LLAMA_31_8B, "cuda")
        torch.cuda.synchronize()
        report["model_build_s"] = time.perf_counter() - start
        measure(model, report, lambda: save(report, args.out))
    except Exception as error:  # the JSON must say what failed, with what was measured so far
        record_error(report, error)
    return finish(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
