"""Throughput with many requests in flight: our engine against `llama-batched-bench`.

Why: one sequence at a time leaves a CPU's matmuls starved for rows; serving many requests
is where batching pays, and llama.cpp's own batched benchmark is what its users quote for
it. Our side is `vllm-tvm bench` (the engine: scheduler, paged KV cache, sampling; the
`concurrency` requests are submitted at once, prompt ids made before timing, one untimed
warm-up wave of the same width), theirs `llama-batched-bench` (token batches with no
sampling: `pl` prompts of `pp` tokens prefilled in batches of `-b` tokens, then `tg` steps of
all `pl` sequences together, after a 16-token warm-up batch). Both run with the same prompt
length, output length and width, the same token budget per forward (2,048) and room for every
sequence at full length.

Only like numbers are divided (`COMPARABLE`): generated tokens over the whole run, prefill
included (`output_tok_s`: ours `output_throughput`, theirs pl*tg / (t_pp + t_tg)). All tokens
over the whole run (ours `total_token_throughput`, theirs `speed`) would give the very same
ratio, both sides counting the same tokens, and stays in the raw rows. Their decode-only
rate (`speed_tg`) has no counterpart on our side, whose decode steps interleave with
prefill chunks, and is kept raw only; `engine_ratio` refuses any other pairing by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from run_llamacpp import parse_batched_bench

BATCH_TOKENS = 2048
"""Token budget of one forward on both sides (ours: max_num_batched_tokens, theirs: -b)."""

COMPARABLE = {"output_tok_s": ("output_throughput", "aggregate")}
"""Compared figure -> (our bench JSON key, llama-batched-bench figure) measuring the same."""


def engine_ratio(ours_key: str, peer_key: str, ours: float, peer: float) -> float:
    """ours / peer for a pair listed in COMPARABLE; ValueError naming the pair otherwise."""
    if (ours_key, peer_key) not in COMPARABLE.values():
        pairs = ", ".join(f"{o} / {p}" for o, p in COMPARABLE.values())
        raise ValueError(f"{ours_key} / {peer_key} divides unlike figures; comparable: {pairs}")
    return ours / peer


def batched_bench_command(
    bin_dir: Path, gguf: Path, prompt: int, output: int, width: int
) -> list[str]:
    """llama-batched-bench for `width` sequences of `prompt` + `output` tokens, on every usable
    CPU, with a context holding all of them (256-token cells per sequence at least)."""
    per_sequence = max(256, prompt + output)
    command = [str(bin_dir / "llama-batched-bench"), "-m", str(gguf)]
    command += ["-t", str(len(os.sched_getaffinity(0))), "-c", str(width * per_sequence)]
    command += ["-b", str(BATCH_TOKENS), "-npp", str(prompt), "-ntg", str(output)]
    # llama.cpp's logger may drop the last line at exit: the width is listed twice.
    return [*command, "-npl", f"{width},{width}", "--output-format", "jsonl"]


def peer_engine_figures(output: str, width: int) -> dict[str, Any]:
    """The compared figures of llama-batched-bench's jsonl for `width`, with its raw row."""
    parsed = parse_batched_bench(output)
    if f"raw_b{width}" not in parsed:
        raise ValueError(f"llama-batched-bench printed no row for {width} sequences")
    row = parsed[f"raw_b{width}"]
    return {
        "aggregate": parsed[f"aggregate_b{width}_tok_s"],
        "decode_only_speed_tg": row["speed_tg"],
        "raw": row,
    }


def run_peer_engine(
    bin_dir: Path, gguf: Path, prompt: int, output: int, width: int
) -> dict[str, Any]:
    """One llama-batched-bench run."""
    command = batched_bench_command(bin_dir, gguf, prompt, output, width)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"llama-batched-bench exited {done.returncode}: {done.stderr[-2000:]}")
    return peer_engine_figures(done.stdout + "\n" + done.stderr, width) | {"command": command}


def our_bench_command(
    gguf: Path,
    prompt: int,
    output: int,
    width: int,
    report: Path,
    compile_flags: Sequence[str] = (),
) -> list[str]:
    """`vllm-tvm bench` at one concurrency level of `width` requests, as many as in flight,
    the model compiled with `compile_flags`."""
    command = [sys.executable, "-m", "vllm_tvm.cli.main", "bench", "--model", str(gguf)]
    command += compile_flags
    command += ["--concurrency", str(width), "--num-prompts", str(width)]
    command += ["--input-len", str(prompt), "--output-len", str(output)]
    command += ["--max-num-batched-tokens", str(BATCH_TOKENS)]
    return [*command, "--output-json", str(report)]


def our_engine_figures(report: dict[str, Any]) -> dict[str, Any]:
    """The compared figures of a `vllm-tvm bench` JSON report (one level)."""
    (level,) = report["levels"]
    ours = {key: level[key] for key, _ in COMPARABLE.values()}
    return ours | {"raw": level, "conditions": report["conditions"]}


def run_our_engine(
    gguf: Path, prompt: int, output: int, width: int, compile_flags: Sequence[str] = ()
) -> dict[str, Any]:
    """One `vllm-tvm bench` run in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="cpu-peer-engine-") as scratch:
        report_path = Path(scratch) / "bench.json"
        command = our_bench_command(gguf, prompt, output, width, report_path, compile_flags)
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"vllm-tvm bench exited {done.returncode}: {done.stderr[-2000:]}")
        return our_engine_figures(json.loads(report_path.read_text()))


def compare(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, float]:
    """Each COMPARABLE figure's ours / llama.cpp's; both sides' figure dicts get the figure
    under its compared name as well (so rounds summarize by one name per figure)."""
    ratios = {}
    for name, (ours_key, peer_key) in COMPARABLE.items():
        ours[name], peer[name] = ours[ours_key], peer[peer_key]
        ratios[name] = engine_ratio(ours_key, peer_key, ours[ours_key], peer[peer_key])
    return ratios
