"""The CLI works on a serving machine that has TVM's runtime but not its compiler.

`TVM_USE_RUNTIME_LIB=1` makes TVM load without libtvm_compiler.so, as on a box that carries
only the runtime bundle (`vllm-tvm runtime-bundle`): `tvm.relax` cannot be imported there, so
no subcommand may need it before it compiles something.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.compiler.build import compile_cached, make_request


def _run_cli(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}
    command = [sys.executable, "-m", "vllm_tvm.cli.main", *arguments]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def test_every_subcommand_lists_its_flags_without_the_compiler() -> None:
    for subcommand in ("compile", "generate", "serve", "bench", "tokenize", "runtime-bundle"):
        result = _run_cli([subcommand, "--help"])
        assert result.returncode == 0, (subcommand, result.stderr[-2000:])


def test_bench_runs_a_prebuilt_artifact_without_the_compiler(
    tiny_model_dir, tmp_path: Path
) -> None:
    model = tiny_model_dir("llama")
    artifact = compile_cached(
        make_request(CompileOptions(model, "llvm", "float32")), show_progress=False
    )
    report_path = tmp_path / "report.json"
    arguments = ["bench", "--model", str(model), "--artifact", str(artifact)]
    arguments += ["--load-format", "dummy", "--input-len", "8", "--output-len", "4"]
    arguments += ["--concurrency", "1", "--output-json", str(report_path)]
    result = _run_cli(arguments)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(report_path.read_text())
    assert report["levels"][0]["total_output_tokens"] == 2 * 4
