"""Expert (MoE) and MLA models built for CUDA on a machine without a GPU: each tiny config
compiles for sm_90a with the cubin embedded, and the expert products get the warp-reduced
GPU schedule of their phase (schedules/gpu_expert.py).

Whether the kernels compute the right numbers needs a GPU: benchmarks/h200_moe_check.py
(its CPU side runs in tests/test_moe_gpu_check_script.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tvm
from tvm import te

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.compiler import cuda_binaries
from vllm_tvm.compiler.build import compile_model, make_request
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs import moe
from vllm_tvm.schedules import gpu_expert

CUDA_MODELS = ["qwen3_moe_sparse_step", "mixtral_top2", "deepseek_v3_mla_qlora_groups"]
"""Qwen3-MoE (sparse step), Mixtral, DeepSeek-V3 (MLA, grouped routing)."""


@pytest.fixture(scope="module", params=CUDA_MODELS)
def expert_cuda_artifact(request, tiny_model_dir, tmp_path_factory) -> Path:
    """One bf16 sm_90a artifact per config (one compile each)."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc on PATH")
    output = tmp_path_factory.mktemp(f"cuda_{request.param}") / "artifact"
    compile_request = make_request(
        CompileOptions(tiny_model_dir(request.param), "cuda", "bfloat16")
    )
    return compile_model(compile_request, output, show_progress=False)


@pytest.mark.slow
def test_expert_and_mla_models_compile_for_sm90a_with_the_cubin(expert_cuda_artifact) -> None:
    manifest = read_manifest(expert_cuda_artifact)
    assert (manifest.target, manifest.dtype) == ("cuda:sm_90a", "bfloat16")
    library = expert_cuda_artifact / "model.so"
    assert cuda_binaries.embedded_cuda_archs(library) == ["sm_90a"]
    assert not cuda_binaries.library_keeps_cuda_source(library)


def test_the_phase_annotation_is_the_one_the_gpu_rule_reads() -> None:
    assert (gpu_expert.EXPERT_PHASE, gpu_expert.DECODE) == (moe.EXPERT_PHASE, moe.DECODE)


ROWS = tvm.tirx.Var("rows", "int64")
"""The run-time row count of `_gathered_product`."""


def _gathered_product(phase: str | None) -> tvm.tirx.PrimFunc:
    """out[r, n] = sum_k x[r, k] * w[experts[r] * 16 + n, k] over a run-time row count (int64
    extents, as legalized Relax ops have)."""
    rows = ROWS
    features, width = tvm.tirx.const(16, "int64"), tvm.tirx.const(64, "int64")
    x = te.placeholder((rows, width), "float32", name="x")
    w = te.placeholder((4 * features, width), "float32", name="w")
    experts = te.placeholder((rows,), "int32", name="experts")
    k = te.reduce_axis((tvm.tirx.const(0, "int64"), width), name="k")
    out = te.compute(
        (rows, features),
        lambda r, n: te.sum(x[r, k] * w[experts[r].astype("int64") * features + n, k], axis=k),
        name="product",
        attrs={} if phase is None else {moe.EXPERT_PHASE: phase},
    )
    return te.create_prim_func([x, w, experts, out])


@pytest.mark.parametrize(
    ("phase", "rows_per_block"), [(moe.DECODE, 1), (moe.PREFILL, gpu_expert.GROUPED_ROWS)]
)
def test_each_phase_gets_its_rows_per_block_and_a_warp_all_reduce(
    phase: str, rows_per_block: int
) -> None:
    target = resolve_target("cuda").make_target()
    scheduled = gpu_expert.ExpertMatmul().apply(_gathered_product(phase), target, False)
    assert scheduled is not None
    loops = [scheduled.get(loop) for loop in scheduled.get_loops(scheduled.get_sblock("product"))]
    bound = {
        str(loop.thread_binding.thread_tag): loop.extent
        for loop in loops
        if loop.thread_binding is not None
    }
    assert int(bound["threadIdx.x"]) == gpu_expert.LANES
    assert int(bound["threadIdx.y"]) == gpu_expert.WARPS
    analyzer = tvm.sym.Analyzer()
    analyzer.bind(ROWS, 64)
    blocks = analyzer.simplify(bound["blockIdx.x"])
    assert int(blocks) == 64 // rows_per_block * (16 // gpu_expert.WARPS)


def test_the_gpu_rule_declines_unannotated_products_and_cpu_targets() -> None:
    rule = gpu_expert.ExpertMatmul()
    cuda = resolve_target("cuda").make_target()
    assert rule.apply(_gathered_product(None), cuda, False) is None
    llvm = resolve_target("llvm").make_target()
    assert rule.apply(_gathered_product(moe.DECODE), llvm, False) is None
