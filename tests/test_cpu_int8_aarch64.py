"""The int8-activation products compiled for aarch64 with dotprod (`sdot`), run under
qemu-user, against llama.cpp's quantize-then-dot (the oracle of tests/test_cpu_int8_dot.py,
shared). qemu checks what the instructions compute, not how fast: speed on Arm needs a real
board. Skipped, naming the tools, where the cross compiler or qemu-aarch64 is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from aarch64_kernels import needs_qemu, run_under_qemu
from gguf import GGMLQuantizationType as Q
from test_cpu_int8_dot import COLUMNS, FEATURES, ROWS, check_product_against_llama_cpp

from vllm_tvm.schedules.cpu_int8_dot import SDOT, int8_gemv
from vllm_tvm.schedules.cpu_int8_gemm import int8_gemm


@needs_qemu
@pytest.mark.parametrize("kernel", [int8_gemv, int8_gemm], ids=["gemv", "gemm"])
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q5_1], ids=lambda t: t.name)
def test_sdot_product_under_qemu_equals_llama_cpp_quantize_then_dot(
    qtype: Q, kernel: object, tmp_path: Path
) -> None:
    func = kernel(qtype.name.lower(), ROWS, FEATURES, COLUMNS, SDOT)

    def run(arrays: list[np.ndarray]) -> np.ndarray:
        (*_, got), assembly = run_under_qemu(func, arrays, tmp_path)
        assert "sdot\tv" in assembly
        return got

    check_product_against_llama_cpp(qtype, run)
