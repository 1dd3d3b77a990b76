"""`vllm-tvm compile --target cuda` on a machine with no GPU yields an sm_90a cubin artifact."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.compiler.cuda_build import (
    embedded_cuda_archs,
    library_embeds_cuda_binary,
    library_keeps_cuda_source,
)

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")


def test_cuda_artifact_library_carries_an_sm90a_cubin(cuda_artifact: Path) -> None:
    library = cuda_artifact / "model.so"
    assert library_embeds_cuda_binary(library, "sm_90a")
    assert "sm_90a" in embedded_cuda_archs(library)
    assert not library_keeps_cuda_source(library)


def test_cuda_artifact_manifest_names_target_and_dtype(cuda_artifact: Path) -> None:
    manifest = read_manifest(cuda_artifact)
    assert manifest.target == "cuda:sm_90a"
    assert manifest.target_kind == "cuda"
    assert manifest.dtype == "bfloat16"
