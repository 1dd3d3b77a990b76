"""The tiny Qwen2.5-VL and Qwen3.5 models build for CUDA (sm_90a) with their image
functions: the vision towers (segment-masked attention, sectioned rotary, merger; Qwen2.5-VL's
windows, Qwen3.5's learned position table) and the prefill at explicit M-RoPE positions
(Qwen3.5's over the hybrid decoder, its gated full-attention layers rotating interleaved
sections) lower and compile with nvcc like the decoders do, in fp32 and in bfloat16."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vllm_tvm.cli.main import main as cli_main

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("checkpoint", ["tiny_qwen2_5_vlm", "tiny_qwen3_5_vlm"])
def test_the_vision_functions_build_for_cuda(
    request: pytest.FixtureRequest, checkpoint: str, tmp_path: Path, dtype: str
) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    path = request.getfixturevalue(checkpoint).path
    output = tmp_path / "artifact"
    arguments = ["compile", str(path), "--target", "cuda:sm_90a"]
    assert cli_main([*arguments, "--dtype", dtype, "--output", str(output)]) == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert {"encode_images", "prefill_images"} <= set(manifest["functions"])
    vision = manifest["runtime"]["vision"]
    assert vision["multimodal_rope"] and vision["patch_merge"]["spatial_merge_size"] == 2
