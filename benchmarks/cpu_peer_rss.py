"""Peak resident memory of one short generation: `vllm-tvm generate` against llama.cpp.

Why: on a CPU box memory decides which model fits beside everything else, and a peak taken
by the same tool on both sides (`/usr/bin/time -v`: the largest RSS the kernel saw for the
process or any one of its waited-for children) is the figure a user would see. Our side is
`vllm-tvm generate` with its artifact already compiled and cached (one untimed run first, so
the measured one loads the cached artifact, as a user's second run does); theirs
`llama-completion` (llama.cpp's plain text completion, no conversation mode). Both get the
same prompt, greedy decoding, the same number of new tokens and a KV cache of the same
capacity in tokens (ours `--num-blocks` blocks of 32 tokens, theirs `-c`). Pages of a
memory-mapped model file count in the RSS once read (llama.cpp maps the file by default).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TIME = "/usr/bin/time"
PROMPT = "Once upon a time"
BLOCK_TOKENS = 32
"""Our KV block size in tokens (the engine's default block size)."""

_TIME_FIELDS = {
    "max_rss_kb": ("Maximum resident set size (kbytes)", int),
    "exit_status": ("Exit status", int),
    "user_s": ("User time (seconds)", float),
    "system_s": ("System time (seconds)", float),
}


def parse_time_v(stderr: str) -> dict[str, Any]:
    """The peak RSS, exit status and CPU times `/usr/bin/time -v` printed; ValueError when its
    report is missing (the program was not run under GNU time) or the program failed."""
    figures: dict[str, Any] = {}
    for key, (label, kind) in _TIME_FIELDS.items():
        match = re.search(rf"^\s*{re.escape(label)}: ([0-9.]+)\s*$", stderr, re.MULTILINE)
        if match is None:
            raise ValueError(f"no '{label}' in the output: not GNU time's -v report")
        figures[key] = kind(match.group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", stderr)
    if wall is not None:
        figures["elapsed_s"] = sum(
            float(part) * 60**power for power, part in enumerate(reversed(wall.group(1).split(":")))
        )
    if figures["exit_status"] != 0:
        raise ValueError(f"the measured program exited {figures['exit_status']}: {stderr[-1500:]}")
    return figures


def our_generate_command(
    gguf: Path, tokens: int, context: int, compile_flags: Sequence[str] = ()
) -> list[str]:
    """`vllm-tvm generate` of `tokens` greedy tokens with a `context`-token KV pool, the
    model compiled with `compile_flags`."""
    if context % BLOCK_TOKENS:
        raise ValueError(f"context {context} is not a multiple of {BLOCK_TOKENS}-token blocks")
    command = [sys.executable, "-m", "vllm_tvm.cli.main", "generate", "--model", str(gguf)]
    command += [
        *compile_flags,
        "--prompt",
        PROMPT,
        "--max-tokens",
        str(tokens),
        "--temperature",
        "0",
    ]
    command += ["--max-model-len", str(context), "--num-blocks", str(context // BLOCK_TOKENS)]
    return [*command, "--json"]


def peer_generate_command(bin_dir: Path, gguf: Path, tokens: int, context: int) -> list[str]:
    """`llama-completion` of `tokens` greedy tokens with a `context`-token KV cache."""
    threads = str(len(os.sched_getaffinity(0)))
    command = [str(bin_dir / "llama-completion"), "-m", str(gguf), "-p", PROMPT]
    command += ["-n", str(tokens), "--temp", "0", "-c", str(context), "-t", threads]
    return [*command, "-no-cnv"]


def peak_rss(command: list[str]) -> dict[str, Any]:
    """Run `command` under `/usr/bin/time -v` (stdin closed); its figures and the command."""
    done = subprocess.run(
        [TIME, "-v", *command], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    return parse_time_v(done.stderr) | {"command": command}


def compile_artifact_untimed(command: list[str]) -> None:
    """One untimed run of our `generate` `command`, so the measured runs find the artifact
    cached."""
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"vllm-tvm generate exited {done.returncode}: {done.stderr[-2000:]}")


def rss_ratio(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, float]:
    """Our peak RSS over llama.cpp's."""
    return {"max_rss_kb": ours["max_rss_kb"] / peer["max_rss_kb"]}
