"""The compile-time repair of TVM's CPU sliding-window prefill kernel: applied to TVM's own
kernel it adds exactly the missing initialisation and still parses; anything it does not
recognise fails by name. (That the repaired kernel computes the right attention is checked
against transformers in tests/test_sliding_window.py.)"""

from __future__ import annotations

import pytest
import tvm
from tvm.relax.frontend.nn.llm._prefill_kernels import _attention_prefill_cpu

from vllm_tvm.compiler.sliding_window_kernel import (
    SLIDING_PREFILL_SYMBOL,
    SlidingWindowKernelError,
    repair_sliding_window_prefill,
)


def _module_with_tvm_kernel() -> tvm.IRModule:
    kernel = _attention_prefill_cpu(2, 4, 16, "float32", True, {}, sliding_window_size=8)
    return tvm.IRModule({SLIDING_PREFILL_SYMBOL: kernel})


def test_repair_initialises_the_running_maximum_once() -> None:
    before = _module_with_tvm_kernel()[SLIDING_PREFILL_SYMBOL].script()
    repaired = repair_sliding_window_prefill(_module_with_tvm_kernel())
    after = repaired[SLIDING_PREFILL_SYMBOL].script()
    added = [line.strip() for line in after.splitlines() if line not in before.splitlines()]
    assert added == ["new_m[0] = T.float32(-50000.0)"]
    assert repaired[SLIDING_PREFILL_SYMBOL].attrs["global_symbol"] == SLIDING_PREFILL_SYMBOL


def test_a_module_without_the_kernel_is_refused_by_name() -> None:
    with pytest.raises(SlidingWindowKernelError, match=SLIDING_PREFILL_SYMBOL):
        repair_sliding_window_prefill(tvm.IRModule({}))
