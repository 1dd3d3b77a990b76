"""`vllm-tvm generate` and `serve` refuse cheap input errors before the slow start.

Specification (each run as a subprocess, as a user runs it): exit code 1, one error line
naming the bad value, and TVM never imported (`-X importtime` lists every module the process
imported), so the refusal comes in well under the seconds TVM's import and a compile take.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_tvm.cli.preflight import _cuda_problem

QUICK_SECONDS = 5.0
"""Far below a start that imports TVM (several seconds) and compiles (tens of seconds), and
loose enough for a busy two-core machine."""


def run_cli(
    *arguments: str, stdin: str = "", **env_vars: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    command = [sys.executable, "-X", "importtime", "-m", "vllm_tvm.cli.main", *arguments]
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root, **env_vars}
    start = time.monotonic()
    result = subprocess.run(command, input=stdin, env=env, capture_output=True, text=True)
    return result, time.monotonic() - start


def assert_refused_early(result: subprocess.CompletedProcess[str], seconds: float, message: str):
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert result.returncode == 1, result.stderr[-2000:]
    assert any(message in line for line in errors), errors
    assert "tvm" not in imported and "torch" not in imported
    assert seconds < QUICK_SECONDS


@pytest.mark.parametrize(
    ("arguments", "stdin", "message"),
    [
        (("--prompt", ""), "", "generate: error: the prompt from --prompt is empty"),
        (("--prompt", "-"), " \n", "the prompt from standard input (--prompt -) is empty"),
        (("--prompt-file", "/no/such/prompt.txt"), "", "--prompt-file /no/such/prompt.txt"),
        (("--prompt", "hi", "--max-tokens", "0"), "", "max_tokens must be at least 1, got 0"),
        (("--prompt", "hi", "--model", "/no/such/model"), "", "model path /no/such/model does"),
        (
            ("--prompt", "hi", "--model", "no-such-org/no-such-model"),
            "",
            "model 'no-such-org/no-such-model' is neither a local path nor in the local "
            "Hugging Face cache",
        ),
        ((), "", "give exactly one of --prompt TEXT, --prompt - (stdin), --prompt-file"),
    ],
)
def test_generate_refuses_bad_input_before_loading_tvm(
    arguments: tuple[str, ...], stdin: str, message: str, tmp_path: Path
) -> None:
    result, seconds = run_cli("generate", *arguments, stdin=stdin, HF_HUB_CACHE=str(tmp_path))
    assert_refused_early(result, seconds, message)


def test_an_empty_prompt_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("\n", encoding="utf-8")
    result, seconds = run_cli("generate", "--prompt-file", str(prompt))
    assert_refused_early(result, seconds, f"the prompt from --prompt-file {prompt} is empty")


def test_serve_refuses_a_port_out_of_range() -> None:
    result, seconds = run_cli("serve", "--port", "99999")
    assert_refused_early(result, seconds, "serve: error: --port must be between 0 and 65535")


def test_serve_refuses_a_port_in_use() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result, seconds = run_cli("serve", "--host", "127.0.0.1", "--port", str(port))
    assert_refused_early(result, seconds, f"--port {port} on 127.0.0.1 is in use")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(_cuda_problem() is None, reason="this machine has a usable CUDA device")
@pytest.mark.parametrize("command", ["generate", "serve"])
def test_device_cuda_without_a_gpu_is_refused(command: str) -> None:
    if command == "generate":
        result, seconds = run_cli(command, "--prompt", "hi", "--device", "cuda")
    else:
        port = str(free_port())
        result, seconds = run_cli(
            command, "--host", "127.0.0.1", "--port", port, "--device", "cuda"
        )
    assert_refused_early(result, seconds, "--device cuda: ")


def test_version_prints_the_package_version() -> None:
    from vllm_tvm import __version__

    result, _ = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == __version__
