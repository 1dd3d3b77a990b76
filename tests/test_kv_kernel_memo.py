"""The KV cache's kernels are built once per process (compiler/kv_kernel_memo.py): a second
export of the same shapes reuses them and yields the module a plain export yields; another
head size, dtype, window, RoPE scaling or target builds its own; the plain factories are
back after an export."""

from __future__ import annotations

import pytest
from tvm.relax.frontend.nn.llm import kv_cache
from tvm.target import Target

from vllm_tvm.artifacts.compile_options import CompileOptions
from vllm_tvm.compiler.build import make_request
from vllm_tvm.compiler.export import export_model
from vllm_tvm.compiler.kv_kernel_memo import (
    KERNEL_FACTORIES,
    MEMO_ENV,
    built_kernel_count,
    memoised_kv_kernels,
)


def _export_script(model_dir, target: str = "llvm", dtype: str = "float32") -> str:
    """The exported module as TVMScript text (structural equality is no oracle here: two
    plain exports of one model already differ by it, their text does not)."""
    return export_model(make_request(CompileOptions(model_dir, target, dtype))).mod.script()


def test_a_memoised_export_is_the_plain_export(tiny_model_dir, monkeypatch) -> None:
    model = tiny_model_dir("llama")
    _export_script(model)
    remembered = built_kernel_count()
    memoised = _export_script(model)
    assert built_kernel_count() == remembered  # every kernel was a hit
    monkeypatch.setenv(MEMO_ENV, "0")
    assert _export_script(model) == memoised


CUDA = Target({"kind": "cuda", "arch": "sm_90a"})
SAME = (2, 4, 16, "float32", False, {}, CUDA)
"""KV heads, query heads, head size, dtype, sliding window, RoPE scaling, target."""


@pytest.mark.parametrize(
    "other",
    [(2, 4, 32, *SAME[3:]), (*SAME[:3], "float16", *SAME[4:]),
     (*SAME[:4], True, *SAME[5:]), (*SAME[:5], {"rope_type": "gptj"}, CUDA),
     (*SAME[:6], Target({"kind": "cuda", "arch": "sm_80"}))],
    ids=["head-size", "dtype", "sliding-window", "rope-scaling", "target"],
)  # fmt: skip
def test_a_kernel_is_reused_for_the_same_arguments_and_built_for_others(other) -> None:
    with memoised_kv_kernels():
        first = kv_cache._attention_decode(*SAME)
        assert kv_cache._attention_decode(*SAME) is first
        before = built_kernel_count()
        assert kv_cache._attention_decode(*other) is not first
        assert built_kernel_count() == before + 1


def test_the_plain_factories_are_back_after_an_export() -> None:
    originals = {name: getattr(kv_cache, name) for name in KERNEL_FACTORIES}
    with memoised_kv_kernels():
        assert all(getattr(kv_cache, name) is not originals[name] for name in originals)
    assert all(getattr(kv_cache, name) is originals[name] for name in originals)
