"""The CUDA split-and-rotate kernel gives TVM's kernel's outputs, and replaces only that kernel.

compiler/rope_kernel.py computes each rotation angle once per (token, feature) instead of per
head. Its outputs must be the values TVM's own kernel gives, bit for bit: both kernels are
built here for the CPU from the same arguments (TVM's `llama_rope_with_position_map`, the
oracle) and run on the same random q/k/v rows and positions, with the rotation on and off.
On the GPU the same expression runs under a thread binding; the H200 check compares the
whole model with transformers (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.relax.frontend.nn.llm.position_embedding import llama_rope_with_position_map

from vllm_tvm.compiler.build import make_request
from vllm_tvm.compiler.export import export_model
from vllm_tvm.compiler.rope_kernel import ROPE_BLOCK, rope_by_position
from vllm_tvm.runtime.model.tvm_runtime import load_runtime

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

CASES = {
    # name: theta, position scale, head_dim, q heads, kv heads, dtype, scaling, rotary_dim
    "llama3 grouped": (500000.0, 1.0, 128, 8, 2, "float32", LLAMA3, 128),
    "default, partial rotary, half": (10000.0, 1.0, 64, 4, 4, "float16", {}, 32),
    "gpt-j pairs, scaled positions": (10000.0, 0.5, 64, 4, 2, "float32", {"rope_type": "gptj"}, 64),
    "default, one kv head": (1000000.0, 1.0, 64, 4, 1, "float32", {}, 64),
}


def _run(func: tirx.PrimFunc, args: tuple, qkv: np.ndarray, positions: np.ndarray, apply: int):
    _, _, head_dim, q_heads, kv_heads, dtype, _, _ = args
    tvm_runtime = load_runtime()
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), "llvm")
    cpu = tvm_runtime.cpu()
    rows = len(positions)
    outputs = [
        tvm_runtime.runtime.empty((rows, heads, head_dim), dtype, cpu)
        for heads in (q_heads, kv_heads, kv_heads)
    ]
    lib["main"](
        tvm_runtime.runtime.tensor(qkv, cpu),
        tvm_runtime.runtime.tensor(positions, cpu),
        *outputs,
        apply,
    )
    return [out.numpy() for out in outputs]


@pytest.mark.parametrize("apply", [1, 0])
@pytest.mark.parametrize("case", list(CASES))
def test_outputs_equal_tvm_kernel_bit_for_bit(case: str, apply: int):
    args = CASES[case]
    _, _, head_dim, q_heads, kv_heads, dtype, _, _ = args
    rng = np.random.default_rng(7)
    qkv = rng.standard_normal((37, q_heads + 2 * kv_heads, head_dim)).astype(dtype)
    positions = rng.integers(0, 130_000, 37).astype("int32")
    theirs = _run(llama_rope_with_position_map(*args), args, qkv, positions, apply)
    ours = _run(rope_by_position(*args), args, qkv, positions, apply)
    for name, expected, got in zip("qkv", theirs, ours, strict=True):
        np.testing.assert_array_equal(got, expected, err_msg=f"{case}: {name}")
    if apply:
        assert not np.array_equal(theirs[0], qkv[:, :q_heads]), "the rotation must move q"


def _rope_kernels(mod: tvm.IRModule) -> dict[str, str]:
    """global symbol -> the block name inside, for every split-and-rotate kernel."""
    found: dict[str, str] = {}
    for _, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc) and len(func.params) == 6:
            script = func.script()
            for block in (ROPE_BLOCK, "llama_fused_rope"):
                if f'T.sblock("{block}")' in script:
                    found[str(func.attrs["global_symbol"])] = block
    return found


def _exported(tiny_model_dir, name: str, target: str) -> tvm.IRModule:
    request = make_request(tiny_model_dir(name), target=target, dtype="float32")
    return export_model(request).mod


def test_cuda_exports_get_the_kernel_and_cpu_exports_keep_tvms(tiny_model_dir):
    assert set(_rope_kernels(_exported(tiny_model_dir, "llama3_rope_tied", "cuda")).values()) == {
        ROPE_BLOCK
    }
    assert set(_rope_kernels(_exported(tiny_model_dir, "llama3_rope_tied", "llvm")).values()) == {
        "llama_fused_rope"
    }


def test_the_cuda_kernel_binds_a_block_per_token_and_a_thread_per_feature(tiny_model_dir):
    mod = _exported(tiny_model_dir, "llama", "cuda")
    (symbol,) = _rope_kernels(mod)
    kernel = next(f for _, f in mod.functions.items() if f.attrs.get("global_symbol") == symbol)
    bindings: list[str] = []

    def keep(loop: tirx.For) -> None:
        if loop.thread_binding is not None:
            bindings.append(str(loop.thread_binding.thread_tag))

    tvm_ffi.structural_walk(kernel, [(tirx.For, keep)])
    assert sorted(bindings) == ["blockIdx.x", "threadIdx.x"]


def test_a_cache_built_with_other_rope_arguments_keeps_tvms_kernel(tiny_model_dir):
    # DeepSeek's latent-attention cache is built with its own rope arguments, not the ones
    # `cache_rope()` reports: its kernel is not the one TVM builds for those, so it stays.
    kernels = _rope_kernels(_exported(tiny_model_dir, "deepseek_v2_mla_greedy", "cuda"))
    assert list(kernels.values()) == ["llama_fused_rope"]
