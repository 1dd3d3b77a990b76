"""The tiny Gemma 3 vision model builds for CUDA (sm_90a) with its image functions: the
encoder and the image prefill lower and compile with nvcc like the decoder does, in fp32
and in bfloat16 (whose 16-byte vector kernels take 8 lanes, where fp32's take 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vllm_tvm.cli.main import main as cli_main

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_vision_functions_build_for_cuda(tiny_gemma3_vlm, tmp_path: Path, dtype: str) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    output = tmp_path / "artifact"
    arguments = ["compile", str(tiny_gemma3_vlm.path), "--target", "cuda:sm_90a"]
    assert cli_main([*arguments, "--dtype", dtype, "--output", str(output)]) == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert {"encode_images", "prefill_images"} <= set(manifest["functions"])
    assert manifest["runtime"]["vision"]["tokens_per_image"] == 4
