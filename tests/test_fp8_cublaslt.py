"""FP8 x FP8 GEMMs on cuBLASLt for FP8 checkpoints: activation encoding, dispatch, CUDA build.

What is checked here (no GPU): the per-token E4M3 encoding against `ml_dtypes` (every finite
E4M3 value, every midpoint between neighbours, random values), the round trip of a token
row within E4M3's precision, which products the pass sends to the FP8 GEMM, and that an FP8
checkpoint's sm_90a artifact builds with the call and carries the extension. That the GEMM
computes the product is checked on the H200 against transformers (benchmarks/
h200_quant_check.py, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest
import tvm
from quantized_checkpoints import rewrite_checkpoint
from test_fp8_checkpoints import SCHEMES, fp8_quantizer
from tvm import te

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.artifacts.manifest import read_manifest
from vllm_tvm.checkpoints.fp8_weights import fp8_row_scaled
from vllm_tvm.compiler.build import compile_model, make_request
from vllm_tvm.compiler.export import export_model
from vllm_tvm.compiler.fp8_gemm_dispatch import (
    FP8_GEMM_FUNCTION,
    dispatch_fp8_gemms,
    fp8_gemm_applies,
)
from vllm_tvm.extensions.cublaslt import EXTENSION_NAME
from vllm_tvm.schedules.fp8_activation import (
    E4M3_MAX,
    encode_e4m3,
    quantize_tokens,
    token_scales,
)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")


def _e4m3_values(codes: np.ndarray) -> np.ndarray:
    return codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def test_e4m3_encoding_equals_ml_dtypes() -> None:
    n = te.var("n")
    x = te.placeholder((n,), "float32", name="x")
    codes = te.compute((n,), lambda i: encode_e4m3(x[i]), name="codes")
    encode = tvm.tirx.build(te.create_prim_func([x, codes]), target="llvm")
    finite = np.sort(np.unique(_e4m3_values(np.arange(256, dtype=np.uint8))))
    finite = finite[np.isfinite(finite)]
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            finite,
            (finite[:-1] + finite[1:]) / 2,  # ties: to the even code
            rng.uniform(-E4M3_MAX, E4M3_MAX, 20000),
            rng.normal(0.0, 2.0**-7, 20000),  # subnormal range
            [0.0, -0.0],
        ]
    ).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros(len(values), np.uint8))
    encode(tvm.runtime.tensor(values), out)
    expected = values.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    mismatched = np.nonzero(out.numpy() != expected)[0]
    assert mismatched.size == 0, (values[mismatched[:5]], out.numpy()[mismatched[:5]])


def test_token_rows_round_trip_within_e4m3_precision() -> None:
    rows, k = te.var("rows"), 64
    x = te.placeholder((rows, k), "float16", name="x")
    scales = token_scales(x)
    codes = quantize_tokens(x, scales)
    quantize = tvm.tirx.build(te.create_prim_func([x, scales, codes]), target="llvm")
    rng = np.random.default_rng(1)
    values = rng.normal(0.0, 1.0, (4, k)) * np.array([[1e-3], [1.0], [300.0], [0.0]])
    values = values.astype(np.float16)
    scale_out = tvm.runtime.tensor(np.zeros(4, np.float32))
    code_out = tvm.runtime.tensor(np.zeros((4, k), np.uint8))
    quantize(tvm.runtime.tensor(values), scale_out, code_out)
    decoded = _e4m3_values(code_out.numpy()) * scale_out.numpy()[:, None]
    exact = values.astype(np.float32)
    # Three mantissa bits: half a unit in the last place is 2**-4 of the value.
    assert np.all(np.abs(decoded - exact) <= np.abs(exact) * 2.0**-4 + 1e-30)
    assert np.abs(_e4m3_values(code_out.numpy())[:3]).max(axis=1).tolist() == [E4M3_MAX] * 3
    assert not decoded[3].any()


def test_fp8_gemm_needs_fp8_tensor_cores_and_row_scales() -> None:
    assert [fp8_gemm_applies(a) for a in ("sm_80", "sm_89", "sm_90a", "sm_100a", None)] == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert fp8_row_scaled(SCHEMES["per_tensor"])
    assert fp8_row_scaled(SCHEMES["per_channel"])
    assert not fp8_row_scaled(SCHEMES["block"])
    assert not fp8_row_scaled({"quant_method": "awq", "bits": 4, "group_size": 32})


@pytest.fixture(scope="module")
def per_channel_fp8(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8_cublaslt")
    quantizer = fp8_quantizer("per_channel")
    rewrite_checkpoint(tiny_model_dir("llama"), root / "model", SCHEMES["per_channel"], quantizer)
    return root / "model"


def _script_counts(mod: tvm.IRModule, function: str) -> tuple[int, int]:
    script = mod[function].script()
    return script.count(FP8_GEMM_FUNCTION), script.count("R.call_tir(nt_matmul_fp8")


def test_row_scaled_fp8_products_go_to_the_fp8_gemm(per_channel_fp8) -> None:
    request = make_request(CompileOptions(per_channel_fp8, "cuda", "bfloat16"))
    mod, rewritten = dispatch_fp8_gemms(export_model(request).mod)
    layers = 2
    per_layer = 4  # qkv, o, gate_up, down: every projection is FP8, the head is not
    assert _script_counts(mod, "prefill") == (layers * per_layer, 0)
    assert _script_counts(mod, "decode") == (layers * per_layer, 0)
    fp8_gemms, tir_products = _script_counts(mod, "decode_single")
    assert (fp8_gemms, tir_products > 0) == (0, True)
    assert rewritten == 2 * layers * per_layer


@pytest.mark.slow
@needs_nvcc
def test_fp8_checkpoint_builds_for_sm90a_calling_the_fp8_gemm(per_channel_fp8, tmp_path) -> None:
    request = make_request(CompileOptions(per_channel_fp8, "cuda", "bfloat16"))
    artifact = compile_model(request, tmp_path / "artifact", show_progress=False)
    assert read_manifest(artifact).extensions == [EXTENSION_NAME]
    library = next(artifact.glob("*.so"))
    assert FP8_GEMM_FUNCTION.encode() in library.read_bytes()
