#!/usr/bin/env bash
# Install what `vllm-tvm compile --attention flashinfer` needs into the project's venv:
# FlashInfer's JIT sources (flashinfer-python) and the few Python modules its JIT imports.
# Its GPU-runtime dependencies (cuDNN frontend, CUTLASS DSL, NCCL bindings, ...) are not
# needed to compile the attention kernels ahead of time, so they are left out (--no-deps).
# torch comes with the test extra (scripts/install.sh --test); nvcc must be on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install --no-deps \
    "flashinfer-python==0.6.15.post1" "nvidia-ml-py>=12" "einops>=0.8" "tabulate>=0.9" "ninja>=1.11"
