"""The CPU schedule of the quantized NT matmul: its register-level choices per target and
format, and its products against the same function lowered without any schedule."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te
from tvm.s_tir import dlight as dl
from tvm.target import Target

from vllm_tvm.checkpoints.weight_formats import quant_format
from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.model_defs.layers import _nt_matmul
from vllm_tvm.model_defs.quant_linear import QuantWeight
from vllm_tvm.schedules.cpu_matmul import CPUNTMatmul
from vllm_tvm.schedules.cpu_quant_matmul import (
    ROW_BLOCK,
    TOKEN_BLOCK,
    TOKEN_FEATURE_BLOCK,
    VECTOR,
    WIDE_VECTOR,
    CPUQuantNTMatmul,
    QuantMatmulShape,
    shape_for,
)

IN_FEATURES = 512


@pytest.mark.parametrize(
    ("mcpu", "packed", "expected"),
    [
        ("skylake-avx512", True, QuantMatmulShape(WIDE_VECTOR, ROW_BLOCK)),
        ("skylake-avx512", False, QuantMatmulShape(WIDE_VECTOR, 1)),
        ("haswell", True, QuantMatmulShape(VECTOR, ROW_BLOCK)),
        ("haswell", False, QuantMatmulShape(VECTOR, 1)),
    ],
)
def test_vector_width_follows_the_target_and_row_blocks_the_packed_formats(
    mcpu: str, packed: bool, expected: QuantMatmulShape
) -> None:
    assert shape_for(Target({"kind": "llvm", "mcpu": mcpu}), packed) == expected


def _function(fmt_name: str, rows: int, features: int) -> tvm.tirx.PrimFunc:
    fmt = quant_format(fmt_name)
    weight = QuantWeight(fmt, (features, IN_FEATURES))
    x = te.placeholder((1, rows, IN_FEATURES), "float32", name="x")
    planes = [
        te.placeholder(fmt.plane_shape(p, (features, IN_FEATURES)), p.dtype, name=p.name)
        for p in fmt.planes
    ]
    y = _nt_matmul(x, weight._dequantize(planes), "float32")
    return te.create_prim_func([x, *planes, y]).with_attr("global_symbol", "main")


def _inputs(fmt_name: str, rows: int, features: int) -> list[np.ndarray]:
    fmt = quant_format(fmt_name)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1, rows, IN_FEATURES), dtype=np.float32)]
    for plane in fmt.planes:
        shape = fmt.plane_shape(plane, (features, IN_FEATURES))
        if plane.dtype == "uint32":
            arrays.append(rng.integers(0, 1 << 32, size=shape, dtype=np.uint32))
        elif plane.dtype == "int8":
            arrays.append(rng.integers(-128, 128, size=shape, dtype=np.int8))
        else:
            arrays.append((rng.random(shape) * 0.01).astype(plane.dtype))
    return arrays


def _run(module: tvm.IRModule, target: Target, arrays: list[np.ndarray]) -> np.ndarray:
    kernel = tvm.compile(module, target=target)["main"]
    args = [tvm.runtime.tensor(a, tvm.cpu()) for a in arrays]
    rows, features = arrays[0].shape[1], arrays[1].shape[0]
    out = tvm.runtime.tensor(np.zeros((1, rows, features), np.float32), tvm.cpu())
    kernel(*args, out)
    return out.numpy()


def _check_against_unscheduled(
    fmt_name: str, rows: int, features: int, *rules: dl.ScheduleRule
) -> tvm.IRModule:
    target = resolve_target("llvm").make_target()
    module = tvm.IRModule({"main": _function(fmt_name, rows, features)})
    with target:
        # A module of its own: the pass schedules its input module in place.
        scheduled = dl.ApplyDefaultSchedule(*rules)(
            tvm.IRModule({"main": _function(fmt_name, rows, features)})
        )
    assert "nt_matmul_acc_rf" not in module.script()
    arrays = _inputs(fmt_name, rows, features)
    expected = _run(module, target, arrays)
    got = _run(scheduled, target, arrays)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    return scheduled


@pytest.mark.parametrize("shape", [QuantMatmulShape(WIDE_VECTOR, ROW_BLOCK), None])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("fmt_name", ["q4_1", "q8_0"])
def test_scheduled_product_equals_the_unscheduled_lowering(
    fmt_name: str, rows: int, shape: QuantMatmulShape | None
) -> None:
    """Both the register-blocked single-row path and the tile path (3 rows), with the
    AVX-512 width forced and with the target's own choice, sum the same products as the
    plain loop nest LLVM gets unscheduled (only the order of the fp32 sums differs)."""
    scheduled = _check_against_unscheduled(fmt_name, rows, 80, CPUQuantNTMatmul(shape))
    assert "vectorized" in scheduled.script()


def test_features_in_a_partial_block_fall_to_the_plain_rule() -> None:
    """72 features: the last block of 16 is partial, which the quantized rule declines."""
    scheduled = _check_against_unscheduled("q4_1", 1, 72, CPUQuantNTMatmul(), CPUNTMatmul())
    assert "nt_matmul_acc_rf" not in scheduled.script()


def test_several_rows_of_a_partial_block_equal_the_unscheduled_lowering() -> None:
    """40 features of Q8_0 over 3 token rows (a latent-attention projection's shape): the
    rows after the first were wrong before partial blocks were declined."""
    _check_against_unscheduled("q8_0", 3, 40, CPUQuantNTMatmul(), CPUNTMatmul())


def _symbolic_rows_module(fmt_name: str, features: int) -> tvm.IRModule:
    fmt = quant_format(fmt_name)
    weight = QuantWeight(fmt, (features, IN_FEATURES))
    rows = tvm.tirx.Var("seq_len", "int64")
    x = te.placeholder((1, rows, IN_FEATURES), "float32", name="x")
    planes = [
        te.placeholder(fmt.plane_shape(p, (features, IN_FEATURES)), p.dtype, name=p.name)
        for p in fmt.planes
    ]
    y = _nt_matmul(x, weight._dequantize(planes), "float32")
    func = te.create_prim_func([x, *planes, y]).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func})


def _run_each(module: tvm.IRModule, target: Target, inputs: list[list[np.ndarray]]) -> list:
    """`module` compiled once, run on each set of arrays (rows vary: a symbolic row count)."""
    kernel = tvm.compile(module, target=target)["main"]
    outputs = []
    for arrays in inputs:
        args = [tvm.runtime.tensor(a, tvm.cpu()) for a in arrays]
        rows, features = arrays[0].shape[1], arrays[1].shape[0]
        out = tvm.runtime.tensor(np.zeros((1, rows, features), np.float32), tvm.cpu())
        kernel(*args, out)
        outputs.append(out.numpy())
    return outputs


@pytest.mark.parametrize(
    ("fmt_name", "mcpu"), [("q4_1", None), ("q8_0", None), ("q4_1", "haswell")]
)
def test_register_blocked_rows_equal_the_unscheduled_lowering(
    fmt_name: str, mcpu: str | None
) -> None:
    """A symbolic row count (verify, prefill) run at 1, 2, 5 and 7 rows (padded to the
    3-row register block) and at 6 (two whole blocks), at this machine's vector width and
    at AVX2's: the default register-blocked products (TOKEN_BLOCK x TOKEN_FEATURE_BLOCK)
    and the one-row-at-a-time tile path equal the unscheduled lowering within fp32
    reordering, so the padded rows never reach the output."""
    target = resolve_target("llvm").make_target()
    if mcpu is not None:
        target = Target({"kind": "llvm", "mcpu": mcpu})
    default = shape_for(target, packed=fmt_name != "q8_0")
    assert (default.token_block, default.token_feature_block) == (TOKEN_BLOCK, TOKEN_FEATURE_BLOCK)
    per_row = QuantMatmulShape(default.vector, default.row_block, 1, 1)
    # Each from a module of its own: the pass schedules its input module in place.
    unscheduled = _symbolic_rows_module(fmt_name, 48)
    with target:
        blocked = dl.ApplyDefaultSchedule(CPUQuantNTMatmul())(_symbolic_rows_module(fmt_name, 48))
        one_at_a_time = dl.ApplyDefaultSchedule(CPUQuantNTMatmul(per_row))(
            _symbolic_rows_module(fmt_name, 48)
        )
    assert "x_pad" not in unscheduled.script()
    assert "x_pad" in blocked.script()
    assert "x_pad" not in one_at_a_time.script()
    inputs = [_inputs(fmt_name, rows, 48) for rows in (1, 2, 5, 6, 7)]
    expected = _run_each(unscheduled, target, inputs)
    for arm in (blocked, one_at_a_time):
        for got, want in zip(_run_each(arm, target, inputs), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_partial_sums_are_not_a_workspace_buffer() -> None:
    """The partial sums keep the default scope, which TVM lowers to a stack array on CPU: a
    "local" buffer is a workspace allocation that LLVM, in a model's library, must assume
    aliases the activations (every partial sum then goes to memory after each FMA)."""
    target = resolve_target("llvm").make_target()
    for module in (
        tvm.IRModule({"main": _function("q4_1", 1, 48)}),
        _symbolic_rows_module("q4_1", 48),
    ):
        with target:
            scheduled = dl.ApplyDefaultSchedule(CPUQuantNTMatmul())(module)
        assert "nt_matmul_acc_rf" in scheduled.script()
        assert 'scope="local"' not in scheduled.script()
