"""On the GPU box: llama.cpp's own benchmarks on the random Llama-3.1-8B GGUF, as JSON.

Why: llama.cpp is measured with the tools its users quote (llama-bench, llama-batched-bench),
built from the same sources each time (build_llamacpp.sh), on a GGUF of the exact shape
(write_random_gguf.py). This script waits for the build, writes the GGUF if it is missing,
runs both tools and turns their JSON output into the keys compare.py reads.

Definitions:
  decode_b1_tok_s        llama-bench tg128 (128 decode steps from an empty context, no
                         prompt), median of its repetitions
  ttft_1024_ms_median    llama-bench pp1024: one 1,024-token prefill, median (its first
                         repetition runs cold, hence the median rather than its average)
  aggregate_bB_tok_s     batched-bench, B sequences of 1,024 prompt tokens then 256 decode
                         steps each: B*256 / (prefill time + decode time)
  decode_bB_tok_s        batched-bench speed_tg: B*256 / decode time
  (batched-bench's B = 1 row is kept as batched_aggregate_b1_tok_s / batched_decode_b1_tok_s)
Both tools call llama_decode on token batches with no sampling and no server: their level is
the runner's, not an engine's. llama-bench runs each test once untimed before its
repetitions; llama-batched-bench warms up with one 16-token batch only.

usage: python3 benchmarks/peers/run_llamacpp.py --work /tmp/peers/llamacpp
           --gguf /tmp/peers/llama31_8b_f16.gguf --out $OUT/llamacpp.json [--npl 1,32,64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

from llama31_8b import config_json
from result_conditions import EACH_BATCH, merge_results, model_shape, record_workload
from write_random_gguf import partial_path, write_random_gguf

PROMPT, GENERATED = 1024, 256
BATCHED_WARMUP = "one 16-token batch before the first batch size (llama-batched-bench's own)"
BENCH_ARGS = ["-ngl", "99", "-fa", "1", "-p", str(PROMPT), "-n", "128", "-r", "5", "-o", "json"]


def wait_for_build(work: Path, timeout_s: float) -> Path:
    """The build's bin/ once build_llamacpp.sh wrote DONE; raises on FAILED or timeout."""
    if not (work / "build.log").exists():
        raise FileNotFoundError(
            f"no llama.cpp build in {work} (no build.log): the machine went cold since the "
            "build was started, or it never was; run benchmarks/peers/build_llamacpp.sh cuda "
            f"{work} (carry .peers/llamacpp), then this again"
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (work / "FAILED").exists():
            log = (work / "build.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"llama.cpp build failed: {(work / 'FAILED').read_text()}\n{log}")
        if (work / "DONE").exists():
            return work / "build" / "bin"
        time.sleep(2)
    raise TimeoutError(f"no DONE in {work} after {timeout_s:.0f} s; is build_llamacpp.sh running?")


def ensure_gguf(path: Path, stall_s: float = 60) -> dict:
    """Wait for the GGUF another process is writing, or write it; returns what was done.

    A `.partial` file that stops growing for `stall_s` seconds is left over from a writer
    that died, and is written anew.
    """
    partial = partial_path(path)
    size, since = -1, time.monotonic()
    while not path.exists():
        try:
            now_size = partial.stat().st_size
        except FileNotFoundError:  # no writer, or it finished (renamed) just now
            break
        if now_size != size:
            size, since = now_size, time.monotonic()
        elif time.monotonic() - since > stall_s:
            print(f"{partial} stopped growing at {size} bytes: writing it anew", flush=True)
            break
        time.sleep(2)
    if path.exists():
        return {"gguf": "present"}
    return {"gguf": "written here", **write_random_gguf(path)}


def parse_llama_bench(stdout: str) -> dict:
    """pp and tg results of `llama-bench -o json` (a JSON array, one object per test).

    Keys: `ttft_{P}_ms_median` and `prefill_{P}_tok_s` for a P-token prompt test,
    `decode_b1_tok_s` for the generation test; medians over the repetitions.
    """
    result: dict = {}
    for test in json.loads(stdout):
        times_ms = [ns / 1e6 for ns in test["samples_ns"]]
        median_ms = statistics.median(times_ms)
        prompt, generated = test["n_prompt"], test["n_gen"]
        if prompt > 0 and generated == 0:
            result[f"ttft_{prompt}_ms_median"] = median_ms
            result[f"prefill_{prompt}_tok_s"] = prompt / median_ms * 1e3
            result[f"raw_pp{prompt}_ms"] = times_ms
            record_workload(result, f"ttft_{prompt}_ms_median", prompt, 0, 1, warmup=EACH_BATCH)
        elif generated > 0 and prompt == 0:
            result["decode_b1_tok_s"] = generated / median_ms * 1e3
            result["decode_b1_ms_per_step"] = median_ms / generated
            result[f"raw_tg{generated}_ms"] = times_ms
            record_workload(result, "decode_b1_tok_s", 0, generated, 1, warmup=EACH_BATCH)
    if "decode_b1_tok_s" not in result or not any(k.startswith("ttft_") for k in result):
        raise ValueError(f"llama-bench output lacks a pp or tg test: {stdout[:500]}")
    return result


def parse_batched_bench(output: str) -> dict:
    """Aggregate and decode-only rates from `llama-batched-bench --output-format jsonl`.

    The batch-1 row is kept as `batched_*_b1_*`: the b1 decode number is llama-bench's tg.
    A batch size listed twice keeps its first row.
    """
    result: dict = {}
    for line in output.splitlines():
        line = line.strip()
        if not (line.startswith("{") and '"speed_tg"' in line):
            continue
        row = json.loads(line)
        b = row["pl"]
        prefix = "batched_" if b == 1 else ""
        if f"raw_b{b}" in result:
            continue
        result[f"{prefix}aggregate_b{b}_tok_s"] = b * row["tg"] / (row["t_pp"] + row["t_tg"])
        result[f"{prefix}decode_b{b}_tok_s"] = row["speed_tg"]
        result[f"raw_b{b}"] = row
        for kind in ("aggregate", "decode"):
            key = f"{prefix}{kind}_b{b}_tok_s"
            record_workload(result, key, row["pp"], row["tg"], b, warmup=BATCHED_WARMUP)
    if not result:
        raise ValueError(f"llama-batched-bench printed no jsonl rows: {output[-1500:]}")
    return result


def run(cmd: list[str], log: Path) -> tuple[str, str]:
    """Run a tool; (stdout, stderr), both also saved to `log`; raises on failure."""
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout, proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="build_llamacpp.sh's WORKDIR")
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--npl", default="1,32,64")
    parser.add_argument("--wait-build-s", type=float, default=420)
    args = parser.parse_args()
    npl = [int(n) for n in args.npl.split(",")]
    report: dict = {
        "engine": "llama.cpp",
        "definitions": __doc__.split("Definitions:")[1].split("usage:")[0].strip(),
        "conditions": {"level": "runner", "dtype": "float16", "shape": model_shape(config_json())},
    }
    logs = args.out.parent
    logs.mkdir(parents=True, exist_ok=True)
    try:
        report["gguf_write"] = ensure_gguf(args.gguf)
        report["gguf_bytes"] = args.gguf.stat().st_size
        bin_dir = wait_for_build(args.work, args.wait_build_s)
        bench, _ = run(
            [str(bin_dir / "llama-bench"), "-m", str(args.gguf), *BENCH_ARGS],
            logs / "llama-bench.log",
        )
        merge_results(report, parse_llama_bench(bench))
        print(
            f"tg128 {report['decode_b1_tok_s']:.1f} tok/s, pp{PROMPT} "
            f"{report[f'ttft_{PROMPT}_ms_median']:.1f} ms",
            flush=True,
        )
        context = max(npl) * (PROMPT + GENERATED)
        # llama.cpp's logger prints from a thread the program does not wait for at exit, so
        # the last row can be lost: a final repeat of the first batch size keeps it safe.
        sizes = ",".join(map(str, [*npl, npl[0]]))
        batched_cmd = [
            str(bin_dir / "llama-batched-bench"),
            "-m",
            str(args.gguf),
            "-ngl",
            "99",
            "-fa",
            "on",
            "-c",
            str(context),
            "-npp",
            str(PROMPT),
            "-ntg",
            str(GENERATED),
            "-npl",
            sizes,
            "--output-format",
            "jsonl",
        ]
        batched = "\n".join(run(batched_cmd, logs / "llama-batched-bench.log"))
        merge_results(report, parse_batched_bench(batched))
        missing = [b for b in npl if f"raw_b{b}" not in report]
        if missing:
            raise RuntimeError(f"batched-bench skipped batch sizes {missing} (context {context})")
        for b in npl:
            row = report[f"raw_b{b}"]
            print(
                f"b{b}: aggregate {b * row['tg'] / (row['t_pp'] + row['t_tg']):.0f} tok/s, "
                f"decode-only {row['speed_tg']:.0f} tok/s",
                flush=True,
            )
    except Exception as error:  # the JSON must say what failed, with what was measured so far
        report["error"] = f"{type(error).__name__}: {error}"
        report["traceback"] = traceback.format_exc()
        print(report["traceback"], file=sys.stderr, flush=True)
    args.out.write_text(json.dumps(report, indent=1))
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
