"""On a CUDA machine: vllm-tvm's compiled Llama against HF transformers on the same random
weights — greedy tokens (correctness) and b1/batched decode and TTFT (speed).

Weights are made on the GPU by transformers (`from_config`, bf16, its own init) and handed to
our runtime through DLPack in manifest order (fused q/k/v and gate/up concatenated by torch),
so no checkpoint file is written. Speed does not depend on weight values.

With several `--artifact`s (e.g. `--gemm cublaslt` and `--gemm tir` builds of one model) each
is measured in turn on the same weights, in the same run. `--gemm-bench` times the cuBLASLt
extension against torch.matmul on the model's projection shapes.

Level: these are forward calls of the ModelRunner (no scheduler, no stop rules), recorded as
`level: runner` in each run's `conditions`; the engine-level decode-only figure, the level
vLLM's is taken at, comes from benchmarks/engine_decode.py.

usage (on the GPU box, artifacts and the runtime bundle built elsewhere):
  PYTHONPATH=.device/tvm_bundle:. python3 benchmarks/h200_llama.py --artifact A [B ...]
      --config C [--check] [--bench] [--gemm-bench] [--batches 1,32,64]
      [--decode-context 128,1024] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from h200_kernels import attention_bench, gemm_bench, timed, uses_cublaslt
from peers.result_conditions import EACH_BATCH, model_shape, record_workload
from transformers import AutoConfig, AutoModelForCausalLM

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.runtime.model.runner import ModelRunner


def make_oracle(config_dir: Path, seed: int = 0) -> torch.nn.Module:
    config = AutoConfig.from_pretrained(config_dir)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.eval()


def dlpack_params(artifact: Path, oracle: torch.nn.Module, tvm_module) -> tuple[list, list]:
    """Parameters in manifest order as TVM tensors sharing torch's memory (and the torch
    tensors, which must stay alive)."""
    state = oracle.state_dict()
    keep, params = [], []
    for entry in read_manifest(artifact).params:
        parts = [state[name] for name in entry.sources]
        tensor = parts[0] if len(parts) == 1 else torch.cat(parts, entry.concat_axis)
        tensor = tensor.contiguous()
        assert list(tensor.shape) == entry.shape, (entry.name, tensor.shape, entry.shape)
        keep.append(tensor)
        params.append(tvm_module.runtime.from_dlpack(tensor))
    return params, keep


def greedy_ours(runner: ModelRunner, prompt: list[int], new_tokens: int, seq_id: int = 0):
    runner.kv_cache.add_sequence(seq_id)
    logits = runner.prefill([seq_id], [prompt])
    out = []
    for _ in range(new_tokens):
        token = int(logits[0].argmax())
        out.append(token)
        logits = runner.decode([seq_id], [token])
    runner.kv_cache.remove_sequence(seq_id)
    return out


def check(runner, oracle, vocab: int, report: dict, prompt_len: int = 32) -> None:
    rng = np.random.default_rng(1)
    results = []
    for trial in range(4):
        prompt = rng.integers(100, vocab - 100, size=prompt_len).tolist()
        ours = greedy_ours(runner, prompt, 32)
        with torch.no_grad():
            ref = oracle.generate(
                torch.tensor([prompt], device="cuda"),
                max_new_tokens=32,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        ref = ref[0, len(prompt) :].tolist()
        pairs = enumerate(zip(ours, ref, strict=True))
        first_diff = next((i for i, (a, b) in pairs if a != b), None)
        entry = {"trial": trial, "equal": ours == ref, "first_diff": first_diff}
        if first_diff is not None:
            # Near-tie evidence: HF's own top-2 logit gap at the divergence point.
            ctx = torch.tensor([prompt + ref[:first_diff]], device="cuda")
            with torch.no_grad():
                last = oracle(ctx).logits[0, -1].float()
            top = torch.topk(last, 2)
            entry["hf_top2_gap"] = float(top.values[0] - top.values[1])
            entry["ours_token_hf_logit_gap"] = float(top.values[0] - last[ours[first_diff]])
        results.append(entry)
        print("check", entry, flush=True)
    # Prefill logits agreement on one prompt.
    prompt = rng.integers(100, vocab - 100, size=64).tolist()
    runner.kv_cache.add_sequence(9)
    ours = runner.prefill([9], [prompt], logit_positions=range(64))
    runner.kv_cache.remove_sequence(9)
    with torch.no_grad():
        ref = oracle(torch.tensor([prompt], device="cuda")).logits[0].float().cpu().numpy()
    # Both bf16 computations against an fp32 run of the same weights: who is closer?
    oracle.float()
    with torch.no_grad():
        exact = oracle(torch.tensor([prompt], device="cuda")).logits[0].float().cpu().numpy()
    oracle.to(torch.bfloat16)

    def rel(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    report["check"] = {
        "greedy": results,
        "prefill_rel_l2_ours_vs_hf_bf16": rel(ours, ref),
        "prefill_rel_l2_ours_vs_fp32": rel(ours, exact),
        "prefill_rel_l2_hf_bf16_vs_fp32": rel(ref, exact),
    }
    print("prefill", report["check"], flush=True)


def profile(runner: ModelRunner, name: str, step, report: dict) -> None:
    """Per-function device time of `step()` (each VM call synchronised: slower overall, but
    it says where the time goes)."""
    import collections

    spent: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter = collections.Counter()
    started: dict[str, float] = {}

    def instrument(func, name, before, ret, *args):
        torch.cuda.synchronize()
        if before:
            started[name] = time.perf_counter()
        else:
            spent[name] += time.perf_counter() - started[name]
            calls[name] += 1
        return 0

    runner.vm.set_instrument(instrument)
    step()
    runner.vm.set_instrument(None)
    top = sorted(spent.items(), key=lambda kv: -kv[1])[:14]
    report[f"profile_{name}"] = {k: [round(v * 1e3, 3), calls[k]] for k, v in top}
    print(f"profile {name} (ms, calls):", report[f"profile_{name}"], flush=True)


def profile_decode(runner: ModelRunner, batch: int, context: int, report: dict) -> None:
    ids = list(range(5000, 5000 + batch))
    for sid in ids:
        runner.kv_cache.add_sequence(sid)
    prefill_in_chunks(runner, ids, [[7] * context for _ in ids])
    profile(
        runner, f"decode_b{batch}_ctx{context}", lambda: runner.decode(ids, [1] * batch), report
    )
    for sid in ids:
        runner.kv_cache.remove_sequence(sid)


def profile_prefill(runner: ModelRunner, length: int, report: dict) -> None:
    runner.kv_cache.add_sequence(6000)
    profile(runner, f"prefill_{length}", lambda: runner.prefill([6000], [[7] * length]), report)
    runner.kv_cache.remove_sequence(6000)


def prefill_in_chunks(runner: ModelRunner, ids: list[int], prompts: list[list[int]]) -> None:
    """Prefill whole prompts, as many per call as fit the runner's prefill chunk."""
    limit = runner.kv_config.prefill_chunk_size
    start = 0
    while start < len(ids):
        end, total = start, 0
        while end < len(ids) and total + len(prompts[end]) <= limit:
            total += len(prompts[end])
            end += 1
        runner.prefill(ids[start:end], prompts[start:end])
        start = end


def bench(
    runner: ModelRunner, vocab: int, batches: list[int], contexts: list[int], report: dict
) -> None:
    rng = np.random.default_rng(2)
    # TTFT for a 1,024-token prompt (prefill + first logits on the host).
    prompt = rng.integers(100, vocab - 100, size=1024).tolist()
    seq = [100]

    def prefill_once():
        runner.kv_cache.add_sequence(seq[0])
        runner.prefill_logits([seq[0]], [prompt]).argmax()
        runner.kv_cache.remove_sequence(seq[0])
        seq[0] += 1

    timed(prefill_once, 2)
    ttft = timed(prefill_once, 5)
    report["ttft_1024_ms_median"] = statistics.median(ttft) * 1e3
    record_workload(report, "ttft_1024_ms_median", 1024, 1, 1)
    print("ttft@1024 ms", report["ttft_1024_ms_median"], flush=True)
    # Decode: batch of b sequences after a `context`-token prompt each; time 64 steps.
    for context, b in ((context, b) for context in contexts for b in batches):
        ids = list(range(1000, 1000 + b))
        prompts = [rng.integers(100, vocab - 100, size=context).tolist() for _ in ids]
        for sid in ids:
            runner.kv_cache.add_sequence(sid)
        prefill_in_chunks(runner, ids, prompts)
        tokens = [1] * b
        runner.decode(ids, tokens)
        steps = 64
        start = time.perf_counter()
        for _ in range(steps):
            tokens = runner.decode_logits(ids, tokens).argmax().tolist()
        elapsed = time.perf_counter() - start
        for sid in ids:
            runner.kv_cache.remove_sequence(sid)
        report[f"decode_b{b}_ctx{context}_tok_s"] = b * steps / elapsed
        record_workload(report, f"decode_b{b}_ctx{context}_tok_s", context, steps, b)
        report[f"decode_b{b}_ctx{context}_ms_per_step"] = elapsed / steps * 1e3
        print(
            f"decode b{b} ctx{context}: {b * steps / elapsed:.1f} tok/s, "
            f"{elapsed / steps * 1e3:.2f} ms/step",
            flush=True,
        )


def sampling_bench(runner: ModelRunner, vocab: int, report: dict) -> None:
    """One decode step's sampling on the device at batch 64 (argmax; temperature 0.7 with
    top-p 0.9; with top-k 40 too) against copying the logits and numpy's argmax."""
    ids = list(range(7000, 7064))
    for sid in ids:
        runner.kv_cache.add_sequence(sid)
    prefill_in_chunks(runner, ids, [[7] * 16 for _ in ids])
    logits = runner.decode_logits(ids, [1] * 64)
    rows = len(ids)
    keys = np.arange(rows, dtype=np.uint32)

    def sample(top_k: int, top_p: float):
        return lambda: logits.sample(
            np.full(rows, 0.7), np.full(rows, top_k), np.full(rows, top_p), np.zeros(rows), keys
        )

    cases = {
        "device_argmax": logits.argmax,
        "device_top_p_0.9": sample(0, 0.9),
        "device_top_k_40_top_p_0.9": sample(40, 0.9),
        "host_copy_and_numpy_argmax": lambda: logits._tensor.numpy().argmax(axis=-1),
    }
    for label, fn in cases.items():
        seconds = statistics.median(timed(fn, 10))
        report[f"sampling_b64_{label}_ms"] = round(seconds * 1e3, 3)
        print(f"sampling b64 {label}: {seconds * 1e3:.3f} ms", flush=True)
    for sid in ids:
        runner.kv_cache.remove_sequence(sid)


def bench_hf_eager(oracle, vocab: int, report: dict) -> None:
    rng = np.random.default_rng(3)
    # Same-run baseline: HF transformers eager (no torch.compile), b1 decode after 128 tokens.
    prompt = torch.tensor([rng.integers(100, vocab - 100, size=128).tolist()], device="cuda")
    with torch.no_grad():
        oracle.generate(
            prompt, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0
        )
        t = timed(
            lambda: oracle.generate(
                prompt,
                max_new_tokens=65,
                min_new_tokens=65,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            ),
            3,
        )
        t1 = timed(
            lambda: oracle.generate(
                prompt, max_new_tokens=1, do_sample=False, eos_token_id=None, pad_token_id=0
            ),
            3,
        )
    report["hf_eager_b1_tok_s"] = 64 / (statistics.median(t) - statistics.median(t1))
    print("hf eager b1 tok/s", report["hf_eager_b1_tok_s"], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--artifact", type=Path, nargs="+", required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--check", action="store_true")
    parser.add_argument(
        "--check-prompt-len", type=int, default=32, help="longer than a sliding window to test it"
    )
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--gemm-bench", action="store_true")
    parser.add_argument("--hf", action="store_true", help="also time HF eager b1 decode")
    parser.add_argument("--batches", default="1,32,64")
    parser.add_argument("--decode-context", default="128", help="comma-separated lengths")
    parser.add_argument("--profile-batches", default="1")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from vllm_tvm.runtime.tvm_runtime import load_runtime

    tvm = load_runtime(require_cuda=True)
    report: dict = {"gpu": torch.cuda.get_device_name(), "runs": {}}
    oracle = make_oracle(args.config)
    vocab = oracle.config.vocab_size
    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.decode_context.split(",")]
    gemm_benched = False  # the GEMM shapes are timed once, with the first cuBLASLt artifact
    for artifact in args.artifact:
        # Every timed call ran once untimed at its batch size first (bench()).
        run: dict = {
            "conditions": {
                "level": "runner",
                "dtype": read_manifest(artifact).dtype,
                "shape": model_shape(oracle.config.to_dict()),
                "warmup": EACH_BATCH,
            }
        }
        report["runs"][str(artifact)] = run
        params, _torch_tensors = dlpack_params(artifact, oracle, tvm)
        start = time.perf_counter()
        runner = ModelRunner(
            artifact,
            None,
            device="cuda",
            max_model_len=args.max_model_len,
            max_batch_size=max([*batches, 4]),
            max_total_seq_len=max(batches) * (max(contexts) + 128) + 4096,
            prefill_chunk_size=2048,
            params=params,
            show_progress=False,
        )
        run["runner_start_s"] = time.perf_counter() - start
        if args.check:
            check(runner, oracle, vocab, run, args.check_prompt_len)
        if args.bench:
            bench(runner, vocab, batches, contexts, run)
            profile_prefill(runner, 1024, run)
            if runner.can_sample_on_device:
                sampling_bench(runner, vocab, run)
            for b in (int(b) for b in args.profile_batches.split(",")):
                profile_decode(runner, b, max(contexts), run)
        if args.gemm_bench and not gemm_benched and uses_cublaslt(runner):
            gemm_bench(tvm, oracle.config.to_dict(), run)
            gemm_benched = True
        del runner, params, _torch_tensors
        torch.cuda.empty_cache()
    if args.hf:
        bench_hf_eager(oracle, vocab, report)
        attention_bench(oracle.config.to_dict(), report)
    print(json.dumps(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
