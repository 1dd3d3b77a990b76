"""Names of the compile-time kernel choices (`--gemm`, `--attention`).

Kept apart from the compiler modules that implement them (gemm_dispatch.py, attention.py),
which import TVM's compiler, and below the runtime: the CLI lists these names, and every front
end checks them (compile_options.py), on serving machines that carry only TVM's runtime, where
importing `tvm.relax` fails.
"""

from __future__ import annotations

GEMM_CUBLASLT = "cublaslt"
GEMM_TIR = "tir"
GEMM_BACKENDS = (GEMM_CUBLASLT, GEMM_TIR)

ATTENTION_TIR = "tir"
ATTENTION_FLASHINFER = "flashinfer"
ATTENTION_BACKENDS = (ATTENTION_TIR, ATTENTION_FLASHINFER)
