"""The whole hybrid decoder builds for cuda:sm_90a with nvcc (build only: no GPU here).

A tiny Qwen3-Next in bf16: Gated DeltaNet and gated full-attention layers, a dense layer
and routed layers with the sigmoid-gated shared expert, through the project's lowering
pipeline, into a library that embeds an sm_90a cubin and no CUDA source. What the model
computes is checked on CPU against transformers (test_hybrid_model.py); the layers' GPU
kernels are checked in test_gated_delta_net_cuda.py.
"""

from __future__ import annotations

import shutil

import pytest
from test_runtime_spec import HYBRID_CONFIG

from vllm_tvm.compiler import cuda_build
from vllm_tvm.compiler.pipeline import lowering_pipeline
from vllm_tvm.compiler.recurrent_kernels import TargetRecurrentKernels
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.architectures import DEFINITIONS

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")

MOE_CONFIG = {
    **HYBRID_CONFIG,
    "hidden_size": 64,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 24,
    "mlp_only_layers": [0],
}


def test_a_hybrid_moe_model_builds_an_sm90a_cubin(tmp_path) -> None:
    family = DEFINITIONS["hybrid"]
    config = family.parse_config(MOE_CONFIG)
    assert config.sparse_layers and config.shared_expert_intermediate_size
    spec = resolve_target("cuda:sm_90a")
    target = spec.make_target()
    model = family.build_model(config, "bfloat16", target, kernels=TargetRecurrentKernels(target))
    mod, _ = model.export_tvm(spec=model.export_spec())
    executable = cuda_build.build_relax_module(mod, spec, relax_pipeline=lowering_pipeline(target))
    path = cuda_build.export(executable, tmp_path / "hybrid.so", spec)
    assert cuda_build.embedded_cuda_archs(path) == ["sm_90a"]
    assert not cuda_build.library_keeps_cuda_source(path)
