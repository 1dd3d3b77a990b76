"""schedules/cpu_elementwise.py and vector_math.exp against float64 numpy, compiled for this
machine's CPU target (the vector width the models get).

The rule must take the SwiGLU kernel a model's MLP fuses (split of the gate_up product,
silu, multiply) as one parallel loop over 16-lane vectors, and compute what numpy computes
in float64 to about fp32 rounding; it must leave alone what it cannot vectorise (a
reduction) and other targets. Token-level agreement of whole models with transformers on
the CPU: test_generate_matches_transformers.py and the GGUF family tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op
from tvm.script import tirx as T

from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules import vector_math
from vllm_tvm.schedules.cpu_elementwise import CPUElementwise, sigmoid

N = 1 << 16
WIDTH = 96


@pytest.fixture(scope="module")
def target() -> tvm.target.Target:
    return resolve_target("llvm").make_target()


@T.prim_func(s_tir=True)
def _exp_and_sigmoid(
    x: T.Buffer((N,), "float32"), exp: T.Buffer((N,), "float32"), sig: T.Buffer((N,), "float32")
):
    T.func_attr({"tirx.is_scheduled": True})
    for outer in T.serial(N // 16):
        for lane in T.vectorized(16):
            exp[outer * 16 + lane] = vector_math.exp(x[outer * 16 + lane])
            sig[outer * 16 + lane] = sigmoid(x[outer * 16 + lane])


def test_vector_exp_and_sigmoid_against_float64(target) -> None:
    kernel = tvm.compile(_exp_and_sigmoid, target=target)
    x = np.concatenate([np.linspace(-100, 100, N // 2), np.linspace(-10, 10, N // 2)])
    x = x.astype(np.float32)
    buffers = [tvm.runtime.tensor(a, tvm.cpu()) for a in (x, np.zeros_like(x), np.zeros_like(x))]
    kernel(*buffers)
    exp, sig = (buffer.numpy().astype(np.float64) for buffer in buffers[1:])
    exact = np.exp(x.astype(np.float64))
    normal = (exact >= 2.0**-126) & (exact < 2.0**127)
    assert np.abs(exp[normal] / exact[normal] - 1).max() < 3e-7
    exact_sigmoid = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert np.abs(sig[x > -87] / exact_sigmoid[x > -87] - 1).max() < 3e-7
    tiny = x <= -87  # clamped at 2^-127 from -88: silu(x) = x * sig stays under 1e-36
    assert np.abs(sig[tiny] - exact_sigmoid[tiny]).max() <= 2.0**-126


class _SwiGLU(nn.Module):
    def forward(self, gate_up: nn.Tensor) -> nn.Tensor:
        gate, up = op.split(gate_up, 2, axis=-1)
        return op.silu(gate) * up


def _fused(module: nn.Module, spec: dict) -> tirx.PrimFunc:
    """The one fused TIR function of `module`, legalized and fused as the compiler does."""
    mod, _ = module.export_tvm(spec)
    passes = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    fused = tvm.transform.Sequential(passes)(mod)
    (func,) = [f for f in fused.functions.values() if isinstance(f, tirx.PrimFunc)]
    return func


def _loop_kinds(func: tirx.PrimFunc) -> list[tuple[tirx.ForKind, int | None]]:
    """(kind, static extent or None) of every loop of `func`, outermost first."""
    kinds: list[tuple[tirx.ForKind, int | None]] = []

    def keep(loop: tirx.For) -> None:
        extent = int(loop.extent) if isinstance(loop.extent, tirx.IntImm) else None
        kinds.append((loop.kind, extent))

    tvm_ffi.structural_walk(func.body, [(tirx.For, keep)], order="pre")
    return kinds


def test_swiglu_is_one_parallel_vector_loop_matching_float64(target) -> None:
    func = _fused(
        _SwiGLU(), {"forward": {"gate_up": nn.spec.Tensor([1, "n", 2 * WIDTH], "float32")}}
    )
    with target:
        scheduled = CPUElementwise().apply(func, target, False).mod["main"]
    kinds = _loop_kinds(scheduled)
    assert kinds[0][0] == tirx.ForKind.PARALLEL
    assert kinds[1:] == [(tirx.ForKind.VECTORIZED, 16)]
    kernel = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}))
    rows = 37
    gate_up = np.random.default_rng(0).uniform(-20, 20, (1, rows, 2 * WIDTH)).astype(np.float32)
    out = tvm.runtime.empty((1, rows, WIDTH), "float32")
    kernel(tvm.runtime.tensor(gate_up), out)
    gate, up = gate_up[..., :WIDTH].astype(np.float64), gate_up[..., WIDTH:]
    expected = gate / (1 + np.exp(-gate)) * up
    np.testing.assert_allclose(out.numpy(), expected, rtol=5e-7, atol=1e-30)


class _RowSum(nn.Module):
    def forward(self, x: nn.Tensor) -> nn.Tensor:
        return op.sum(op.silu(x), axis=-1)


def test_declines_reductions_and_other_targets(target) -> None:
    reduction = _fused(_RowSum(), {"forward": {"x": nn.spec.Tensor([1, "n", WIDTH], "float32")}})
    with target:
        assert CPUElementwise().apply(reduction, target, False) is None
    swiglu = _fused(
        _SwiGLU(), {"forward": {"gate_up": nn.spec.Tensor([1, "n", 2 * WIDTH], "float32")}}
    )
    cuda = resolve_target("cuda").make_target()
    assert CPUElementwise().apply(swiglu, cuda, False) is None
