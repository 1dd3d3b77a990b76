"""`preflight.skip_torch_import`: a command with no use for torch keeps TVM's FFI from importing
it (seconds of every start), and TVM still loads and runs; a command that draws dummy weights
with torch, or a user setting VLLM_TVM_IMPORT_TORCH=1, gets torch as before.

Oracle: `sys.modules` of a fresh interpreter after `import tvm` and a small TVM computation.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

PROGRAM = """
import sys
from vllm_tvm.cli.preflight import skip_torch_import
skip_torch_import(needs_torch={needs_torch})
import numpy as np
import tvm
assert tvm.runtime.tensor(np.arange(3.0)).numpy().tolist() == [0.0, 1.0, 2.0]
print("torch" if sys.modules.get("torch") is not None else "no torch")
"""


def run(needs_torch: bool, **env_vars: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TVM_IMPORT_TORCH"}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[1]), **env_vars)
    code = PROGRAM.format(needs_torch=needs_torch)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_tvm_loads_and_runs_without_importing_torch() -> None:
    assert run(needs_torch=False) == "no torch"


def test_a_command_that_needs_torch_still_gets_it() -> None:
    assert run(needs_torch=True) == "torch"


def test_the_environment_variable_lets_torch_be_imported() -> None:
    assert run(needs_torch=False, VLLM_TVM_IMPORT_TORCH="1") == "torch"
