"""On the GPU box: vLLM 0.33 on the Llama-3.1-8B shape with random weights — b1 decode, TTFT
and aggregate throughput, written as JSON for compare.py.

Why: the peers' numbers must come from the same machine, back to back with ours. vLLM runs
as its users run it: default engine (torch.compile + CUDA graphs + FlashAttention 3, chunked
prefill, async scheduling), `load_format="dummy"` (random weights), no tokenizer (prompts are
token ids), greedy, `ignore_eos` so every request produces exactly `max_tokens` tokens.
Prefix caching is off so a repeated measurement never reuses an earlier prompt's KV.
Before each measurement's timed calls, the same calls run once untimed with other prompts
(warm-up policy `each-batch`): every row count is warm before it is timed.

Definitions (wall clock around one `LLM.generate` call, median over repetitions):
  decode_b1_tok_s        (N-1) / (t(prompt 128, out N) - t(prompt 128, out 1)), N = 257:
                         decode steps only; prefill and per-call overhead cancel out.
  ttft_1024_ms_median    t(prompt 1024, out 1): prefill + first token, as a user sees it.
  aggregate_bB_tok_s     B*256 / t(B prompts of 1024, out 256): output tokens per second of
                         the whole call, prefill included (vLLM's "output throughput").
  decode_bB_tok_s        B*255 / (t(out 256) - t(out 1)): decode-only output rate. With
                         chunked prefill some decode overlaps prefill, so this is approximate.

usage: PYTHONPATH=/tmp/peers/site python3 benchmarks/peers/run_vllm.py --out $OUT/vllm.json
       [--batches 32,64,256] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from llama31_8b import LLAMA_31_8B, config_json, write_config_dir
from peer_report import finish, record_error, save
from result_conditions import EACH_BATCH, model_shape, record_workload

# Before vLLM is imported: no network, no FlashInfer sampler (its probe imports flashinfer,
# which is not carried), no usage reporting.
for key, value in {
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}.items():
    os.environ.setdefault(key, value)

B1_PROMPT, B1_OUT = 128, 257
AGG_PROMPT, AGG_OUT = 1024, 256
DTYPE = "bfloat16"
clock = time.perf_counter  # replaced by a fake clock in the harness's test


class Prompts:
    """Deterministic random token-id prompts, each one different (no shared prefixes)."""

    def __init__(self, vocab: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.vocab = vocab

    def batch(self, count: int, length: int) -> list[dict]:
        ids = self.rng.integers(1000, self.vocab - 1000, size=(count, length))
        return [{"prompt_token_ids": row.tolist()} for row in ids]


def timed_generate(llm, prompts: list[dict], max_tokens: int) -> float:
    """Seconds of one `generate` call; checks every request produced `max_tokens` tokens."""
    from vllm import SamplingParams

    params = SamplingParams(
        max_tokens=max_tokens,
        min_tokens=max_tokens,
        ignore_eos=True,
        temperature=0.0,
        detokenize=False,
    )
    start = clock()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = clock() - start
    lengths = {len(o.outputs[0].token_ids) for o in outputs}
    if len(outputs) != len(prompts) or lengths != {max_tokens}:
        raise RuntimeError(
            f"expected {len(prompts)} outputs of {max_tokens} tokens, "
            f"got {len(outputs)} with lengths {sorted(lengths)}"
        )
    return elapsed


TTFT_REQUESTS = 7


def measure(
    llm,
    batches: list[int],
    repeats: int,
    report: dict,
    save: Callable[[], None],
    ttft_requests: int = TTFT_REQUESTS,
) -> None:
    """All measurements, in order of increasing cost (TTFT the median of `ttft_requests`
    lone prompts); `save()` after each one."""
    prompts = Prompts(LLAMA_31_8B.vocab_size)
    timed_generate(llm, prompts.batch(8, AGG_PROMPT), 16)  # warm-up: lazy inits, allocator
    timed_generate(llm, prompts.batch(1, B1_PROMPT), 32)

    t1 = [timed_generate(llm, prompts.batch(1, B1_PROMPT), 1) for _ in range(5)]
    tn = [timed_generate(llm, prompts.batch(1, B1_PROMPT), B1_OUT) for _ in range(5)]
    step = (statistics.median(tn) - statistics.median(t1)) / (B1_OUT - 1)
    report["decode_b1_tok_s"] = 1.0 / step
    report["decode_b1_ms_per_step"] = step * 1e3
    record_workload(report, "decode_b1_tok_s", B1_PROMPT, B1_OUT, 1)
    report["raw"]["b1_out1_s"], report["raw"][f"b1_out{B1_OUT}_s"] = t1, tn
    print(f"b1 decode: {1 / step:.1f} tok/s ({step * 1e3:.3f} ms/step)", flush=True)
    save()

    for _ in range(2):
        timed_generate(llm, prompts.batch(1, AGG_PROMPT), 1)
    ttft = [timed_generate(llm, prompts.batch(1, AGG_PROMPT), 1) for _ in range(ttft_requests)]
    report["ttft_1024_ms_median"] = statistics.median(ttft) * 1e3
    record_workload(report, "ttft_1024_ms_median", AGG_PROMPT, 1, 1)
    report["raw"]["ttft_1024_s"] = ttft
    print(f"TTFT@1024: {report['ttft_1024_ms_median']:.2f} ms", flush=True)
    save()

    for b in batches:
        timed_generate(llm, prompts.batch(b, AGG_PROMPT), AGG_OUT)  # warm-up of this batch
        timed_generate(llm, prompts.batch(b, AGG_PROMPT), 1)
        full = [timed_generate(llm, prompts.batch(b, AGG_PROMPT), AGG_OUT) for _ in range(repeats)]
        first = [timed_generate(llm, prompts.batch(b, AGG_PROMPT), 1) for _ in range(repeats)]
        t_full, t_first = statistics.median(full), statistics.median(first)
        report[f"aggregate_b{b}_tok_s"] = b * AGG_OUT / t_full
        report[f"aggregate_b{b}_total_tok_s"] = b * (AGG_PROMPT + AGG_OUT) / t_full
        report[f"decode_b{b}_tok_s"] = b * (AGG_OUT - 1) / (t_full - t_first)
        for kind in ("aggregate", "decode"):
            record_workload(report, f"{kind}_b{b}_tok_s", AGG_PROMPT, AGG_OUT, b)
        report["raw"][f"b{b}_out{AGG_OUT}_s"], report["raw"][f"b{b}_out1_s"] = full, first
        print(
            f"b{b}: aggregate {report[f'aggregate_b{b}_tok_s']:.0f} tok/s, decode-only "
            f"{report[f'decode_b{b}_tok_s']:.0f} tok/s ({t_full:.2f} s, prefill+1 "
            f"{t_first:.2f} s)",
            flush=True,
        )
        save()


def kernel_library_state(manifest: Path) -> str:
    """Whether vLLM's `_C_stable_libtorch` is the original or the sm_9x-pruned build."""
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return "vllm not found"
    library = Path(spec.origin).parent / "_C_stable_libtorch.abi3.so"
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    if not manifest.exists():
        return f"unknown (no {manifest}); sha256 {digest}"
    known = json.loads(manifest.read_text())
    if digest == known.get("original_sha256"):
        return "original"
    if digest == known.get("pruned_sha256"):
        return "pruned to sm_9x SASS (fatbin_prune.py)"
    return f"unknown sha256 {digest}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", default="32,64,256")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ttft-requests", type=int, default=TTFT_REQUESTS)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--manifest", type=Path, default=Path(".peers/vllm_b/MANIFEST.json"))
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    report: dict = {
        "engine": "vllm",
        "shape": config_json(),
        "conditions": {
            "level": "engine",
            "dtype": DTYPE,
            "shape": model_shape(config_json()),
            "warmup": EACH_BATCH,
        },
        "raw": {},
        "definitions": __doc__.split("Definitions")[1].split("usage:")[0].strip(),
    }
    try:
        import torch
        import vllm
        from vllm import LLM

        report |= {
            "vllm": vllm.__version__,
            "torch": torch.__version__,
            "kernel_library": kernel_library_state(args.manifest),
            "loadavg_start": os.getloadavg(),
        }
        print(f"vLLM {vllm.__version__}, kernel library: {report['kernel_library']}", flush=True)
        model_dir = write_config_dir(Path(tempfile.mkdtemp(prefix="llama31_8b_")))
        start = time.perf_counter()
        llm = LLM(
            model=str(model_dir),
            load_format="dummy",
            skip_tokenizer_init=True,
            dtype=DTYPE,
            max_model_len=4096,
            gpu_memory_utilization=args.gpu_memory_utilization,
            enable_prefix_caching=False,
            seed=0,
        )
        report["engine_start_s"] = time.perf_counter() - start
        config = llm.llm_engine.vllm_config
        report["scheduler"] = {
            "max_num_seqs": config.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
            "async_scheduling": config.scheduler_config.async_scheduling,
        }
        report["compilation_mode"] = str(config.compilation_config.mode)
        report["cudagraph_mode"] = str(config.compilation_config.cudagraph_mode)
        print(f"engine up in {report['engine_start_s']:.0f} s: {report['scheduler']}", flush=True)
        report["gpu"] = torch.cuda.get_device_name()  # only now: CUDA stays off in the parent
        measure(
            llm, batches, args.repeats, report, lambda: save(report, args.out), args.ttft_requests
        )
    except Exception as error:  # the JSON must say what failed, with what was measured so far
        record_error(report, error)
    return finish(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
