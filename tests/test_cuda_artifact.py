"""`vllm-tvm compile --target cuda` on a machine with no GPU yields an sm_90a artifact (that its
library embeds the sm_90a cubin is checked by the exporter itself: tests/test_cuda_build.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_tvm.artifacts.manifest import read_manifest

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")


def test_cuda_artifact_manifest_names_target_and_dtype(cuda_artifact: Path) -> None:
    manifest = read_manifest(cuda_artifact)
    assert manifest.target == "cuda:sm_90a"
    assert manifest.target_kind == "cuda"
    assert manifest.dtype == "bfloat16"
