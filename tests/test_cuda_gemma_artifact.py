"""Each Gemma generation compiles for sm_90a in bf16 on a machine with no GPU (sliding
layers, in-model RoPE of Gemma 3's local layers, soft-capped logits included); the
library's embedded sm_90a cubin is checked by the exporter itself (tests/test_cuda_build.py).
Running these artifacts on a GPU is not part of this test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.cli.main import main as cli_main

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH"),
    pytest.mark.slow,  # one nvcc model build per test
]


@pytest.mark.parametrize(
    ("name", "architecture"),
    [
        ("gemma", "GemmaForCausalLM"),
        ("gemma2_window_softcap", "Gemma2ForCausalLM"),
        ("gemma3_local_rope", "Gemma3ForCausalLM"),
    ],
)
def test_gemma_compiles_for_sm90a(
    name: str, architecture: str, tiny_model_dir, tmp_path: Path
) -> None:
    output = tmp_path / "artifact"
    arguments = ["compile", str(tiny_model_dir(name)), "--target", "cuda"]
    assert cli_main([*arguments, "--dtype", "bfloat16", "--output", str(output)]) == 0
    manifest = read_manifest(output)
    assert manifest.target == "cuda:sm_90a"
    assert manifest.architecture == architecture
