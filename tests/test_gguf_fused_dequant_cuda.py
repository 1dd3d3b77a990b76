"""Quantized weights on CUDA: dlight's GPU rules accept each fused dequantizing matmul of a
model exactly as they accept its plain counterpart (LowBatchGEMV/Matmul for the symbolic
batch products, GEMV for a single-row product), and a quantized tiny llama builds into a
library with an embedded sm_90a cubin (nvcc, no driver needed: vllm_tvm.compiler.cuda_build)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import tvm
from gguf import GGMLQuantizationType as Q
from gguf_fused_dequant_helpers import write_quantized_llama
from tvm import relax
from tvm.relax.frontend import nn
from tvm.s_tir import dlight as dl

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.checkpoints.model_config import read_model_config
from vllm_tvm.checkpoints.weight_formats import FORMATS
from vllm_tvm.compiler import cuda_binaries
from vllm_tvm.compiler.build import compile_model, make_request
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.architectures import family_for
from vllm_tvm.model_defs.quant_linear import DEQUANTIZE_BLOCK, QuantWeight, apply_weight_formats

TARGET = resolve_target("cuda:sm_90a")


def _fused_prim_funcs(mod: tvm.IRModule, target: tvm.target.Target) -> dict[str, tvm.tirx.PrimFunc]:
    """The NT-matmul TIR functions as the schedule passes see them (pipeline.py's passes
    before scheduling)."""
    passes = tvm.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )
    with target:
        mod = passes(mod)
    return {
        gv.name_hint: func
        for gv, func in mod.functions.items()
        if isinstance(func, tvm.tirx.PrimFunc) and "nt_matmul" in gv.name_hint
    }


def _applies(rule: dl.ScheduleRule, func: tvm.tirx.PrimFunc, target: tvm.target.Target) -> bool:
    with target:
        return rule.apply(func, target, False) is not None


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_quantized_llama(tmp_path_factory.mktemp("cuda") / "q4_1.gguf", Q.Q4_1)


@pytest.fixture(scope="module", params=[Q.Q4_1, Q.Q5_0, Q.Q4_K], ids=lambda t: t.name)
def typed_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    qtype = request.param
    return write_quantized_llama(tmp_path_factory.mktemp("cuda") / f"{qtype.name}.gguf", qtype)


def _rules_per_product(model_file: Path, weight_format: str) -> dict[str, list[str]]:
    """For each NT-matmul function of the model, which of dlight's matmul-family GPU rules
    accept it (names with the format taken out, so both arms' names match)."""
    request = make_request(CompileOptions(model_file, "cuda:sm_90a", weight_format=weight_format))
    config = read_model_config(model_file)
    family = family_for(config)
    target = TARGET.make_target()
    model = family.build_model(family.parse_config(config), request.dtype, target)
    apply_weight_formats(model, request.weight_formats)
    mod, _ = model.export_tvm(spec=model.export_spec())
    rules = {
        "LowBatchGEMV": dl.gpu.LowBatchGEMV(),
        "Matmul": dl.gpu.Matmul(),
        "GEMV": dl.gpu.GEMV(),
    }
    accepted = {}
    for name, func in _fused_prim_funcs(mod, target).items():
        plain_name = re.sub(r"_q\d_[\dk]", "", name)
        accepted[plain_name] = [r for r, rule in rules.items() if _applies(rule, func, target)]
    return accepted


def test_dlight_rules_accept_quantized_products_as_they_accept_plain_ones(
    typed_file: Path,
) -> None:
    quantized = _rules_per_product(typed_file, "native")
    # At least qkv/gate_up, o/down and lm_head, for prefill and for decode (layers, and
    # products of one shape, share a function).
    assert len(quantized) >= 2 * 3
    assert all(quantized.values()), quantized
    assert quantized == _rules_per_product(typed_file, "dequantized")


class _SingleRow(nn.Module):
    # Four K-quant super-blocks per row: with one, the super-block index is a constant and
    # dlight's GEMV declines the function (no model has rows that short).
    def __init__(self, fmt_name: str) -> None:
        self.weight = QuantWeight(FORMATS[fmt_name], (128, 1024))

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return self.weight.nt_matmul(x, "float16")


@pytest.mark.parametrize("fmt_name", list(FORMATS))
def test_dlight_gemv_schedules_a_single_row_quantized_product(fmt_name: str) -> None:
    module = _SingleRow(fmt_name)
    spec = {"forward": {"x": nn.spec.Tensor([1, 1, 1024], "float16")}}
    mod, _ = module.export_tvm(spec=spec)
    target = TARGET.make_target()
    (func,) = _fused_prim_funcs(mod, target).values()
    assert DEQUANTIZE_BLOCK in func.script()
    assert _applies(dl.gpu.GEMV(), func, target)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_quantized_model_builds_a_cuda_library(model_file: Path, tmp_path: Path) -> None:
    request = make_request(CompileOptions(model_file, "cuda:sm_90a"))
    assert request.weight_formats["model.layers.0.mlp.down_proj.weight"] == "q4_1"
    artifact = compile_model(request, tmp_path / "artifact", show_progress=False)
    assert cuda_binaries.library_embeds_cuda_binary(artifact / "model.so", "sm_90a")
