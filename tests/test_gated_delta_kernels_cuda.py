"""The Gated DeltaNet kernels build for cuda:sm_90a with nvcc, scheduled for the GPU.

Build only (no GPU here): one library holding the chunked scan, the decode step and the
causal conv at a real layer's shape (Qwen3-Next: 16 key heads, 32 value heads, head dims
128, conv over 8,192 channels), checked for a real sm_90a cubin and for the GPU layout the
kernels are written for: a thread block per (sequence, head), a thread per value column,
A and P of a chunk in shared memory with barriers between the phases. What they compute
is checked on CPU against a float64 reference (test_gated_delta_kernels.py); the same TIR
runs on both, only the loop kinds differ.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tvm

from vllm_tvm.compiler import cuda_build
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules.causal_conv1d import causal_conv1d
from vllm_tvm.schedules.gated_delta_rule import delta_rule_chunked, delta_rule_step

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")

HEADS_K, HEADS_V, HEAD_DIM, CONV_CHANNELS, KERNEL = 16, 32, 128, 8192, 4


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(exported library, its CUDA source) of the three kernels, built once."""
    funcs = {
        "gdn_chunked": delta_rule_chunked(HEADS_K, HEADS_V, HEAD_DIM, HEAD_DIM, gpu=True),
        "gdn_step": delta_rule_step(HEADS_K, HEADS_V, HEAD_DIM, HEAD_DIM, gpu=True),
        "gdn_conv": causal_conv1d(CONV_CHANNELS, KERNEL, gpu=True),
    }
    module = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    with cuda_build.cuda_build_environment(resolve_target("cuda:sm_90a")) as target:
        built = tvm.tirx.build(module, target=target)
    path = tmp_path_factory.mktemp("gdn_cuda") / "gdn.so"
    built.export_library(str(path))
    return path, built.imports[0].inspect_source()


def test_library_embeds_an_sm90a_cubin_and_no_source(library: tuple[Path, str]) -> None:
    path, _ = library
    assert cuda_build.embedded_cuda_archs(path) == ["sm_90a"]
    assert not cuda_build.library_keeps_cuda_source(path)


def test_every_kernel_is_launched_with_a_thread_per_column(library: tuple[Path, str]) -> None:
    _, source = library
    for name in ("gdn_chunked_kernel", "gdn_step_kernel", "gdn_conv_kernel"):
        assert f"__launch_bounds__({HEAD_DIM}) {name}(" in source, name


def test_the_chunk_matrices_live_in_shared_memory_between_barriers(
    library: tuple[Path, str],
) -> None:
    _, source = library
    chunked = source.split("gdn_chunked_kernel(")[2].split("extern")[0]
    assert chunked.count("__shared__") == 2
    assert chunked.count("__syncthreads()") >= 2
