"""vllm-tvm against llama.cpp on this machine's CPU, back to back, as raw JSON.

Why: a CPU speed claim holds only against the peer measured on the same cores in the same
minutes, since these machines are shared and their speed drifts. This script builds llama.cpp
once from the source vendored in the `llama-cpp-python==0.3.36` sdist (`pip download
--no-binary`, cmake Release, -DGGML_NATIVE=ON) into a cache directory, then runs llama-bench
and our model runner in turns (A B, B A, ... for several rounds), each in a fresh process, and
writes every raw figure with the machine, its load average around each run and the versions.

Definitions (both sides at the runner level: forward calls on token batches, no scheduler):
  decode_b1_tok_s    N decode steps of one sequence after a 1-token prompt, N / seconds
                     (llama-bench `-n N`; ours: `decode` + the compiled argmax per step)
  prefill_P_tok_s    one P-token prompt into an empty cache, P / seconds (llama-bench `-p P`;
                     ours: one `prefill` call, logits of the last token)
Each side runs every test once untimed, then `--repetitions` timed; a round's value is their
median, the file's value the median over rounds, `ratio` = ours / llama.cpp per round.

usage: python3 benchmarks/cpu_peers.py [--gguf FILE] [--prompts 512,2048] [--decode 64]
           [--rounds 3] [--repetitions 3] [--cache DIR] [--out benchmarks/results/X.json]
       python3 benchmarks/cpu_peers.py --build-only     (fetch and build llama.cpp, then stop)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

from run_llamacpp import parse_llama_bench  # noqa: E402

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
TOOLS = ("llama-bench", "llama-batched-bench")
DEFAULT_CACHE = Path.home() / ".cache" / "vllm_tvm" / "cpu_peers"


def default_gguf() -> Path:
    from vllm_tvm.cli.default_model import default_model_path

    return Path(default_model_path())


def build_llamacpp(cache: Path) -> Path:
    """llama.cpp's bin/ with llama-bench, built once from the sdist's vendored source."""
    bin_dir = cache / "build" / "bin"
    if all((bin_dir / tool).exists() for tool in TOOLS):
        return bin_dir
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("cmake not found: install it (`pip install cmake` or apt's cmake)")
    sdists = cache / "sdist"
    found = sorted(sdists.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        pip = [sys.executable, "-m", "pip", "download", LLAMA_CPP_PYTHON]
        subprocess.run([*pip, "--no-binary", ":all:", "--no-deps", "-d", str(sdists)], check=True)
        found = sorted(sdists.glob("llama_cpp_python-*.tar.gz"))
    source = cache / "src"
    if not source.exists():
        with tarfile.open(found[-1]) as archive:
            archive.extractall(source, filter="data")
    (vendored,) = source.glob("llama_cpp_python-*/vendor/llama.cpp")
    configure = [cmake, "-S", str(vendored), "-B", str(cache / "build")]
    options = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF"]
    options += ["-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"]
    subprocess.run([*configure, *options], check=True)
    jobs = str(len(os.sched_getaffinity(0)))
    subprocess.run(
        [cmake, "--build", str(cache / "build"), "-j", jobs, "--target", *TOOLS], check=True
    )
    return bin_dir


def machine() -> dict[str, Any]:
    """What the numbers were taken on."""
    from vllm_tvm.runtime.model.cpu_threads import cgroup_cpu_limit

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "usable_cpus": sorted(os.sched_getaffinity(0)),
        "cgroup_cpu_limit": cgroup_cpu_limit(),
        "shared": "other developers' processes run on the same cores unless stated otherwise",
    }
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            info["cpu"] = value.strip()
        if key.strip() == "flags":
            wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "f16c")
            info["simd"] = [flag for flag in value.split() if flag in wanted]
            break
    return info


def versions() -> dict[str, str]:
    import tvm

    commit = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {"vllm_tvm_commit": commit, "tvm": tvm.__version__, "llama.cpp": LLAMA_CPP_PYTHON}


def run_llamacpp(bin_dir: Path, gguf: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One llama-bench call: every prompt length and the decode test, `repetitions` each."""
    threads = str(len(os.sched_getaffinity(0)))
    command = [str(bin_dir / "llama-bench"), "-m", str(gguf), "-t", threads, "-o", "json"]
    command += ["-p", args.prompts, "-n", str(args.decode), "-r", str(args.repetitions)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    tests = json.loads(done.stdout)
    result = parse_llama_bench(done.stdout)
    figures = {"decode_b1_tok_s": result["decode_b1_tok_s"]}
    for prompt in _prompt_lengths(args):
        figures[f"prefill_{prompt}_tok_s"] = result[f"prefill_{prompt}_tok_s"]
    figures["build_commit"] = tests[0].get("build_commit")
    figures["threads"] = int(threads)
    figures["raw"] = {key: value for key, value in result.items() if key.startswith("raw_")}
    return figures


def run_ours(
    gguf: Path, args: argparse.Namespace, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Our side of a round, in a fresh process (the thread pool is sized once per process),
    with `env` added to this process's environment."""
    command = [sys.executable, str(Path(__file__).resolve()), "--ours-child", "--gguf", str(gguf)]
    command += ["--prompts", args.prompts, "--decode", str(args.decode)]
    command += ["--repetitions", str(args.repetitions)]
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if done.returncode != 0:
        raise RuntimeError(f"our runner exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _prompt_lengths(args: argparse.Namespace) -> list[int]:
    return [int(length) for length in args.prompts.split(",") if length]


def measure_ours(gguf: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Time decode and prefill on our model runner (the child process's job)."""
    import numpy as np

    from vllm_tvm.entrypoints.llm import artifact_for
    from vllm_tvm.runtime.engine.args import EngineArgs
    from vllm_tvm.runtime.model.runner import ModelRunner

    prompts = _prompt_lengths(args)
    longest = max([*prompts, args.decode + 1])
    artifact = artifact_for(EngineArgs(model=str(gguf)))
    runner = ModelRunner(
        artifact,
        gguf,
        max_model_len=longest,
        max_total_seq_len=2 * longest,
        prefill_chunk_size=longest,
        show_progress=False,
    )
    tokens = np.random.default_rng(0).integers(100, runner.vocab_size, size=longest).tolist()
    next_id = iter(range(1 << 30))

    def decode_seconds() -> float:
        seq = next(next_id)
        runner.kv_cache.add_sequence(seq)
        token = int(runner.prefill_logits([seq], [tokens[:1]]).argmax()[0])
        start = time.perf_counter()
        for _ in range(args.decode):
            token = int(runner.decode_logits([seq], [token]).argmax()[0])
        seconds = time.perf_counter() - start
        runner.kv_cache.remove_sequence(seq)
        return seconds

    def prefill_seconds(length: int) -> float:
        seq = next(next_id)
        runner.kv_cache.add_sequence(seq)
        start = time.perf_counter()
        runner.prefill_logits([seq], [tokens[:length]]).argmax()
        seconds = time.perf_counter() - start
        runner.kv_cache.remove_sequence(seq)
        return seconds

    figures: dict[str, Any] = {"threads": runner.cpu_threads, "raw": {}}
    tests = [("decode_b1", args.decode, decode_seconds)]
    tests += [(f"prefill_{p}", p, lambda p=p: prefill_seconds(p)) for p in prompts]
    for name, count, timed in tests:
        timed()  # untimed warm-up, as llama-bench does per test
        seconds = [timed() for _ in range(args.repetitions)]
        figures[f"{name}_tok_s"] = count / statistics.median(seconds)
        figures["raw"][f"{name}_s"] = seconds
    return figures


def _round(bin_dir: Path, gguf: Path, args: argparse.Namespace, index: int) -> dict[str, Any]:
    order = ["llama.cpp", "vllm-tvm"] if index % 2 == 0 else ["vllm-tvm", "llama.cpp"]
    record: dict[str, Any] = {"order": order}
    for side in order:
        load_before = os.getloadavg()
        start = time.time()
        record[side] = run_llamacpp(bin_dir, gguf, args) if side == "llama.cpp" else None
        if side == "vllm-tvm":
            record[side] = run_ours(gguf, args)
        record[side]["wall_s"] = time.time() - start
        record[side]["load_average_before"] = load_before
        record[side]["load_average_after"] = os.getloadavg()
    metrics = [key for key in record["vllm-tvm"] if key.endswith("_tok_s")]
    record["ratio"] = {key: record["vllm-tvm"][key] / record["llama.cpp"][key] for key in metrics}
    print(f"round {index}: " + json.dumps(record["ratio"]), flush=True)
    return record


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds per side and of the per-round ratios."""
    summary: dict[str, Any] = {}
    for key in rounds[0]["ratio"]:
        summary[key] = {
            "vllm-tvm": statistics.median(r["vllm-tvm"][key] for r in rounds),
            "llama.cpp": statistics.median(r["llama.cpp"][key] for r in rounds),
            "ratio_median": statistics.median(r["ratio"][key] for r in rounds),
            "ratio_min": min(r["ratio"][key] for r in rounds),
            "ratio_max": max(r["ratio"][key] for r in rounds),
        }
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", type=Path, default=None, help="default: the embedded model")
    parser.add_argument("--prompts", default="512,2048", help="prefill lengths, comma-separated")
    parser.add_argument("--decode", type=int, default=64, help="decode steps per repetition")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--ours-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    gguf = args.gguf or default_gguf()
    if args.ours_child:
        print(json.dumps(measure_ours(gguf, args)))
        return 0
    bin_dir = build_llamacpp(args.cache)
    if args.build_only:
        print(bin_dir)
        return 0
    rounds = [_round(bin_dir, gguf, args, index) for index in range(args.rounds)]
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "definitions": __doc__.split("Definitions ")[1].split("\n\nusage:")[0],
        "model": gguf.name,
        "machine": machine(),
        "versions": versions() | {"llama.cpp_build_commit": rounds[0]["llama.cpp"]["build_commit"]},
        "settings": {k: v for k, v in vars(args).items() if k not in ("ours_child", "build_only")},
        "summary": summarize(rounds),
        "rounds": rounds,
    }
    out = args.out or HERE / "results" / f"cpu_peers_{report['date'][:10]}.json"
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(report["summary"], indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
