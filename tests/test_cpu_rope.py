"""schedules/cpu_rope.py's RoPE split against TVM's own kernel and float64 numpy, compiled
for this machine's CPU target.

TVM's kernel (`llama_rope_with_position_map`) is what the KV cache ran before; ours must
write the same q, k and v for every RoPE variant it takes (plain, Llama-3 frequency
scaling, a rotary part narrower than the head, YaRN, RoPE switched off), and plain RoPE
must match the textbook rotation of the upper half computed in float64. A variant ours
declines (GPT-J's pairs; long-RoPE likewise) must come back as TVM's kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.relax.frontend.nn.llm import kv_cache
from tvm.relax.frontend.nn.llm.position_embedding import llama_rope_with_position_map

from vllm_tvm.compiler.targets import resolve_target
from vllm_tvm.schedules.cpu_rope import FACTORY, cpu_rope_kernels, rope_cpu

HQ, HKV, D, TOKENS = 6, 2, 64, 37
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "inv_theta_log_scale": 1 / np.log(1e4),
}


@pytest.fixture(scope="module")
def target() -> tvm.target.Target:
    return resolve_target("llvm").make_target()


def _run(func: tvm.tirx.PrimFunc, target, qkv, positions, apply_rope: int) -> list[np.ndarray]:
    kernel = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)
    outs = [tvm.runtime.empty((TOKENS, h, D), "float32") for h in (HQ, HKV, HKV)]
    kernel(tvm.runtime.tensor(qkv), tvm.runtime.tensor(positions), *outs, apply_rope)
    return [out.numpy() for out in outs]


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((TOKENS, HQ + 2 * HKV, D)).astype(np.float32)
    return qkv, rng.integers(0, 5000, TOKENS).astype(np.int32)


@pytest.mark.parametrize(
    ("scaling", "rotary_dim", "apply_rope"),
    [({}, None, 1), (LLAMA3, None, 1), ({}, 32, 1), (YARN, None, 1), ({}, None, 0)],
    ids=["plain", "llama3", "partial_rotary", "yarn", "rope_off"],
)
def test_same_outputs_as_tvms_kernel(target, scaling, rotary_dim, apply_rope) -> None:
    qkv, positions = _inputs()
    args = (1e4, 1.0, D, HQ, HKV, "float32", scaling, rotary_dim)
    ours = _run(rope_cpu(*args), target, qkv, positions, apply_rope)
    stock = _run(llama_rope_with_position_map(*args), target, qkv, positions, apply_rope)
    for mine, theirs in zip(ours, stock, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-6)


def test_plain_rope_against_float64(target) -> None:
    qkv, positions = _inputs()
    q, k, v = _run(rope_cpu(1e4, 1.0, D, HQ, HKV, "float32", {}), target, qkv, positions, 1)
    x = qkv.astype(np.float64)
    angles = positions[:, None] * 1e4 ** (-np.arange(D // 2) * 2 / D)  # [tokens, D / 2]
    cos, sin = (np.tile(f(angles), 2)[:, None, :] for f in (np.cos, np.sin))
    rotated = np.concatenate([-x[..., D // 2 :], x[..., : D // 2]], axis=-1)
    expected = x * cos + rotated * sin
    # fp32 angles of positions up to 5,000: the phase itself is off by up to ~3e-4
    np.testing.assert_allclose(np.concatenate([q, k], axis=1), expected[:, : HQ + HKV], atol=2e-3)
    np.testing.assert_array_equal(v, qkv[:, HQ + HKV :])


def test_declined_variants_are_tvms_kernel_and_only_llvm_gets_ours(target) -> None:
    args = (1e4, 1.0, D, HQ, HKV, "float32", {"rope_type": "gptj"}, None)
    assert tvm_ffi.structural_equal(rope_cpu(*args), llama_rope_with_position_map(*args))
    stock = getattr(kv_cache, FACTORY)
    with cpu_rope_kernels(target):
        assert getattr(kv_cache, FACTORY) is rope_cpu
    with cpu_rope_kernels(resolve_target("cuda").make_target()):
        assert getattr(kv_cache, FACTORY) is stock
    assert getattr(kv_cache, FACTORY) is stock
