"""vllm-tvm against llama.cpp on this machine's CPU, back to back, as raw JSON.

Why: a CPU speed claim holds only against the peer measured on the same cores in the same
minutes, since these machines are shared and their speed drifts. This script builds llama.cpp
once from the source vendored in the `llama-cpp-python==0.3.36` sdist (`pip download
--no-binary`, cmake Release, -DGGML_NATIVE=ON, AMX off where the kernel grants no tile state:
peers/cpu_isa.py) into a cache directory, then runs llama-bench
and our model runner in turns (A B, B A, ... for several rounds), each in a fresh process, and
writes every raw figure with the machine, its load average around each run and the versions.
The comparison has parts (cpu_peer_parts.py: the default model's decode and prefill, an
8,192-token prefill, 0.5B and 1B shapes as F16 / Q8_0 / Q4_K_M, a 3B Q4_K_M, engine
throughput with 16 requests in flight, peak RSS of a short generation), each selectable
with `--tests` and each with a `--quick` variant; the engine and RSS parts define their
figures in cpu_peer_engine.py and cpu_peer_rss.py.

Definitions (runner-level parts: forward calls on token batches, no scheduler):
  decode_b1_tok_s    N decode steps of one sequence after a 1-token prompt, N / seconds
                     (llama-bench `-n N`; ours: `decode` + the compiled argmax per step)
  prefill_P_tok_s    one P-token prompt into an empty cache, P / seconds (llama-bench `-p P`;
                     ours: one `prefill` call, logits of the last token)
Each side runs every test once untimed (a part may turn that off on both sides: llama-bench
`--no-warmup`; for the 8,192-token prompt, whose run takes minutes, a first-call cost is
noise), then `--repetitions` timed; a round's value is their median, the file's value the
median over rounds, `ratio` = ours / llama.cpp per round.

usage: python3 benchmarks/cpu_peers.py [--tests all|PART,...]   (cpu_peer_parts.py lists them)
           [--quick] [--gguf FILE] [--cache DIR] [--out benchmarks/results/X.json]
           [--cpu-int8-activations auto|on|off]     (our side's build, recorded in the file)
       python3 benchmarks/cpu_peers.py --build-only     (fetch and build llama.cpp, then stop)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# This checkout's vllm_tvm, not another install's, here and (PYTHONPATH) in every child.
sys.path[1:1] = [str(HERE.parent), str(HERE / "peers")]

import cpu_peer_engine  # noqa: E402
import cpu_peer_models  # noqa: E402
import cpu_peer_parts  # noqa: E402
import cpu_peer_rss  # noqa: E402
from cpu_peer_engine import compare, run_our_engine, run_peer_engine  # noqa: E402
from cpu_peer_models import matrix_formats, prepare_models, tensor_types  # noqa: E402
from cpu_peer_parts import DEFAULT_MODEL, RUNNER_PARTS, parse_tests, part_sizes  # noqa: E402
from cpu_peer_rss import (  # noqa: E402
    compile_artifact_untimed,
    our_generate_command,
    peak_rss,
    peer_generate_command,
    rss_ratio,
)
from llamacpp_cpu_build import (  # noqa: E402
    LLAMA_CPP_PYTHON,
    build_llamacpp,
    llamacpp_build_options,
)
from run_llamacpp import parse_llama_bench  # noqa: E402

from vllm_tvm.artifacts import compile_options  # noqa: E402

INT8_DEFAULT = compile_options.option_default("cpu_int8_activations")

SETTINGS = ("tests", "quick", "gguf", "cpu_int8_activations")
"""The command-line choices a result file records."""
DEFAULT_CACHE = Path.home() / ".cache" / "vllm_tvm" / "cpu_peers"


def default_gguf() -> Path:
    from vllm_tvm.checkpoints.default_model import default_model_path

    return Path(default_model_path())


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
    return {
        "vllm_tvm_commit": commit,
        "tvm": tvm.__version__,
        "llama.cpp": LLAMA_CPP_PYTHON,
        "llama.cpp_build_options": " ".join(llamacpp_build_options()),
    }


def run_llamacpp(bin_dir: Path, gguf: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One llama-bench call: every prompt length and the decode test, `repetitions` each."""
    threads = str(len(os.sched_getaffinity(0)))
    command = [str(bin_dir / "llama-bench"), "-m", str(gguf), "-t", threads, "-o", "json"]
    command += ["-p", args.prompts, "-n", str(args.decode), "-r", str(args.repetitions)]
    if not getattr(args, "warmup", True):
        command.append("--no-warmup")
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
    command += ["--cpu-int8-activations", getattr(args, "cpu_int8_activations", INT8_DEFAULT)]
    if not getattr(args, "warmup", True):
        command.append("--no-warmup")
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

    from vllm_tvm.entrypoints.resolve import artifact_for
    from vllm_tvm.runtime.engine.args import EngineArgs
    from vllm_tvm.runtime.model.runner import ModelRunner

    prompts = _prompt_lengths(args)
    longest = max([*prompts, args.decode + 1])
    choice = getattr(args, "cpu_int8_activations", INT8_DEFAULT)
    artifact = artifact_for(EngineArgs(model=str(gguf), cpu_int8_activations=choice))
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

    artifact = {
        "dtype": runner.manifest.dtype,
        "matrix_formats": matrix_formats(runner.manifest.params),
        "cpu_int8_activations": runner.manifest.cpu_int8_activations,
    }
    figures: dict[str, Any] = {"threads": runner.cpu_threads, "artifact": artifact, "raw": {}}
    tests = [("decode_b1", args.decode, decode_seconds)]
    tests += [(f"prefill_{p}", p, lambda p=p: prefill_seconds(p)) for p in prompts]
    for name, count, timed in tests:
        if args.warmup:
            timed()  # untimed warm-up, as llama-bench does per test
        seconds = [timed() for _ in range(args.repetitions)]
        figures[f"{name}_tok_s"] = count / statistics.median(seconds)
        figures["raw"][f"{name}_s"] = seconds
    return figures


def interleaved(
    sides: dict[str, Callable[[], dict[str, Any]]],
    ratios: Callable[[dict[str, Any], dict[str, Any]], dict[str, float]],
    index: int,
) -> dict[str, Any]:
    """One round: each side's measurement (llama.cpp first in even rounds, ours first in odd
    ones) with its wall time and the load average around it, then `ratios(ours, theirs)`."""
    order = list(sides) if index % 2 == 0 else list(reversed(sides))
    record: dict[str, Any] = {"order": order}
    for side in order:
        load_before = os.getloadavg()
        start = time.time()
        record[side] = sides[side]()
        record[side]["wall_s"] = time.time() - start
        record[side]["load_average_before"] = load_before
        record[side]["load_average_after"] = os.getloadavg()
    record["ratio"] = ratios(record["vllm-tvm"], record["llama.cpp"])
    print(f"  round {index}: " + json.dumps(record["ratio"]), flush=True)
    return record


def speed_ratios(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, float]:
    """ours / llama.cpp's for every runner-level figure (`*_tok_s`, same definition)."""
    return {key: ours[key] / peer[key] for key in ours if key.endswith("_tok_s")}


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


def part_rounds(
    part: str, sizes: dict[str, Any], bin_dir: Path, gguf: Path, int8: str = INT8_DEFAULT
) -> list[dict]:
    """The interleaved rounds of one part on one model file, our side compiled with
    `--cpu-int8-activations int8`."""
    flags = ["--cpu-int8-activations", int8]
    if part in RUNNER_PARTS:
        args = argparse.Namespace(
            prompts=sizes["prompts"],
            decode=sizes["decode"],
            repetitions=sizes["repetitions"],
            warmup=sizes["warmup"],
            cpu_int8_activations=int8,
        )
        sides = {
            "llama.cpp": lambda: run_llamacpp(bin_dir, gguf, args),
            "vllm-tvm": lambda: run_ours(gguf, args),
        }
        return [interleaved(sides, speed_ratios, i) for i in range(sizes["rounds"])]
    if part == "engine":
        lengths = (sizes["prompt"], sizes["output"], sizes["width"])
        sides = {
            "llama.cpp": lambda: run_peer_engine(bin_dir, gguf, *lengths),
            "vllm-tvm": lambda: run_our_engine(gguf, *lengths, compile_flags=flags),
        }
        return [interleaved(sides, compare, i) for i in range(sizes["rounds"])]
    assert part == "rss", part
    ours = our_generate_command(gguf, sizes["tokens"], sizes["context"], compile_flags=flags)
    compile_artifact_untimed(ours)
    sides = {
        "llama.cpp": lambda: peak_rss(
            peer_generate_command(bin_dir, gguf, sizes["tokens"], sizes["context"])
        ),
        "vllm-tvm": lambda: peak_rss(ours),
    }
    return [interleaved(sides, rss_ratio, i) for i in range(sizes["rounds"])]


def run_matrix(args: argparse.Namespace, bin_dir: Path) -> dict[str, Any]:
    """Every selected part on each of its models: settings, tensor types, summary, rounds."""
    parts = parse_tests(args.tests)
    sizes = {part: part_sizes(part, args.quick) for part in parts}
    kinds = {model for part in parts for model in sizes[part]["models"]}
    files = {DEFAULT_MODEL: args.gguf or default_gguf()}  # and the larger files the parts use
    others = tuple(sorted(kinds - {DEFAULT_MODEL}))
    files |= prepare_models(args.cache, bin_dir, others) if others else {}
    results: dict[str, Any] = {}
    for part in parts:
        results[part] = {"sizes": sizes[part], "models": {}}
        for model in sizes[part]["models"]:
            print(f"{part} on {model}", flush=True)
            types = tensor_types(files[model])
            rounds = part_rounds(
                part, sizes[part], bin_dir, files[model], args.cpu_int8_activations
            )
            results[part]["models"][model] = {
                "file": files[model].name,
                "tensor_types": types,
                "summary": summarize(rounds),
                "rounds": rounds,
            }
    return results


def llamacpp_commit(parts: dict[str, Any]) -> str | None:
    """llama.cpp's build commit as llama-bench reported it (runner-level parts only)."""
    for part in RUNNER_PARTS:
        for result in parts.get(part, {}).get("models", {}).values():
            return result["rounds"][0]["llama.cpp"]["build_commit"]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tests", default="smollm2", help="comma-separated parts, or all")
    parser.add_argument("--quick", action="store_true", help="the parts' quick sizes")
    parser.add_argument("--gguf", type=Path, default=None, help="default: the embedded model")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument(
        "--cpu-int8-activations",
        choices=compile_options.CPU_INT8_ACTIVATION_CHOICES,
        default=INT8_DEFAULT,
        help="our side's int8-activation path (vllm-tvm compile's flag; recorded in the file)",
    )
    parser.add_argument("--ours-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-warmup", dest="warmup", action="store_false", help=argparse.SUPPRESS)
    for child_only in ("--prompts", "--decode", "--repetitions"):
        parser.add_argument(child_only, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ours_child:
        args.decode, args.repetitions = int(args.decode), int(args.repetitions)
        print(json.dumps(measure_ours(args.gguf or default_gguf(), args)))
        return 0
    parse_tests(args.tests)  # refuse an unknown part before building anything
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])
    )
    bin_dir = build_llamacpp(args.cache)
    if args.build_only:
        print(bin_dir)
        return 0
    started = time.time()
    parts = run_matrix(args, bin_dir)
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    report = {
        "date": date,
        "wall_s": time.time() - started,
        "definitions": {
            "runner": __doc__.split("Definitions ")[1].split("\n\nusage:")[0],
            "parts": cpu_peer_parts.__doc__,
            "larger models": cpu_peer_models.__doc__,
            "engine": cpu_peer_engine.__doc__,
            "rss": cpu_peer_rss.__doc__,
        },
        "machine": machine(),
        "versions": versions() | {"llama.cpp_build_commit": llamacpp_commit(parts)},
        "settings": {k: str(v) for k, v in vars(args).items() if k in SETTINGS},
        "parts": parts,
    }
    out = args.out or HERE / "results" / f"cpu_peers_{date[:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    summaries = {p: {m: r["summary"] for m, r in v["models"].items()} for p, v in parts.items()}
    print(json.dumps(summaries, indent=1))
    print(f"wrote {out} ({report['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
