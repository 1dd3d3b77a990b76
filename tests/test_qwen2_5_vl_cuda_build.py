"""The tiny Qwen2.5-VL model builds for CUDA (sm_90a) with its image functions: the
windowed vision tower (segment-masked attention, sectioned rotary, merger) and the prefill
at explicit M-RoPE positions lower and compile with nvcc like the decoder does, in fp32
and in bfloat16."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vllm_tvm.cli.main import main as cli_main

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_vision_functions_build_for_cuda(tiny_qwen2_5_vlm, tmp_path: Path, dtype: str) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    output = tmp_path / "artifact"
    arguments = ["compile", str(tiny_qwen2_5_vlm.path), "--target", "cuda:sm_90a"]
    assert cli_main([*arguments, "--dtype", dtype, "--output", str(output)]) == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert {"encode_images", "prefill_images"} <= set(manifest["functions"])
    vision = manifest["runtime"]["vision"]
    assert vision["multimodal_rope"] and vision["patch_merge"]["spatial_merge_size"] == 2
