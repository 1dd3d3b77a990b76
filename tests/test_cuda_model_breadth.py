"""The definitions added beyond the llama family's first four compile for sm_90a (bf16).

One tiny model per new kernel path keeps CI cost small: GPT-2 covers learned positions,
fp32 LayerNorm, GELU-tanh and the [in, out] projections (OPT adds only ReLU); Phi-3 covers
the model-applied rotary (yarn/longrope) with partial rotary (OLMo-2 and Granite add only
norms and scalar multipliers). Running them on a GPU belongs to the GPU runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_tvm.artifacts.manifest import LIBRARY_NAME
from vllm_tvm.cli.main import main as cli_main
from vllm_tvm.compiler import cuda_binaries

pytestmark = [
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH"),
    pytest.mark.slow,  # one nvcc model build per test
]


@pytest.mark.parametrize("name", ["gpt2_tied", "phi3_longrope_partial"])
def test_family_compiles_for_sm90a_with_the_cubin_embedded(
    name: str, tiny_model_dir, tmp_path: Path
) -> None:
    output = tmp_path / "artifact"
    arguments = ["compile", str(tiny_model_dir(name)), "--target", "cuda"]
    assert cli_main([*arguments, "--dtype", "bfloat16", "--output", str(output)]) == 0
    assert cuda_binaries.embedded_cuda_archs(output / LIBRARY_NAME) == ["sm_90a"]
