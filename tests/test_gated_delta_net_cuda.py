"""The Gated DeltaNet layer and its kernels build for cuda:sm_90a with nvcc, scheduled for the GPU.

Build only (no GPU here): the layer (bf16, prefill and decode) at Qwen3-Next's linear-layer
shape (16 key heads, 32 value heads, head dims 128, conv over 8,192 channels) through the
project's lowering pipeline, checked for a real sm_90a cubin and for the GPU layout the
kernels are written for: a thread block per (sequence, head) or block of 128 channels, a
thread per value column or channel, a chunk's A and P in shared memory with barriers
between the phases. What they compute is checked on CPU against a float64 reference
(test_gated_delta_kernels.py) and transformers (test_gated_delta_net_layer.py); the same
TIR runs on both, only the loop kinds differ.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from gated_delta_layer_module import GatedDeltaNetModule

from vllm_tvm.compiler import cuda_build
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.gated_delta_net import GatedDeltaNetOptions, ProjectionLayout

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")

SHAPE = GatedDeltaNetOptions(
    hidden_size=2048,
    heads_k=16,
    heads_v=32,
    k_dim=128,
    v_dim=128,
    conv_kernel_size=4,
    rms_norm_eps=1e-6,
    layout=ProjectionLayout.GROUPED,
)
KERNELS = ("gated_delta_conv1d", "gated_delta_rule_chunked", "gated_delta_rule_step")


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(exported library, its CUDA source) of the layer, built once."""
    spec = resolve_target("cuda:sm_90a")
    target = spec.make_target()
    module = GatedDeltaNetModule(SHAPE, target, "bfloat16")
    mod, _ = module.export_tvm(spec=module.export_spec())
    executable = cuda_build.build_relax_module(mod, spec, relax_pipeline=lowering_pipeline(target))
    path = cuda_build.export(executable, tmp_path_factory.mktemp("gdn_cuda") / "gdn.so", spec)
    return path, executable.mod.imports[0].imports[0].inspect_source()


def test_library_embeds_an_sm90a_cubin_and_no_source(library: tuple[Path, str]) -> None:
    path, _ = library
    assert cuda_build.embedded_cuda_archs(path) == ["sm_90a"]
    assert not cuda_build.library_keeps_cuda_source(path)


def test_each_kernel_runs_a_thread_per_column(library: tuple[Path, str]) -> None:
    _, source = library
    launches = dict(
        (name, int(threads))
        for threads, name in re.findall(r"__launch_bounds__\((\d+)\) (\w+)_kernel\(", source)
    )
    assert {name: launches.get(name) for name in KERNELS} == dict.fromkeys(KERNELS, 128)


def test_the_chunk_matrices_live_in_shared_memory_between_barriers(
    library: tuple[Path, str],
) -> None:
    _, source = library
    chunked = source.split("gated_delta_rule_chunked_kernel(")[2].split("extern")[0]
    assert chunked.count("__shared__") == 2
    assert chunked.count("__syncthreads()") >= 2
