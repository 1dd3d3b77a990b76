"""Repairs TVM 0.27's CPU paged-prefill kernel for sliding-window layers.

Why: in that kernel (`batch_prefill_paged_kv_cpu_sliding_window`) the running maximum of a
query row's online softmax (`new_m`) is written only when a cached key is inside the window
and read for every key. When a row's first cached key lies outside the window (any prefill
chunk of more than one token that ends past the window, with keys already cached), the read
comes before any write and the row turns to NaN. Decode steps use another kernel and are
not affected; neither are GPU targets (their kernels keep the maximum differently).

The repair initialises `new_m` together with the row's maximum `m_val`, so a masked key
leaves the maximum unchanged, as the kernel intends. The kernel is rewritten through its
TVMScript text (this TVM exposes no TIR mutator to Python); if its text no longer has the
one line the repair anchors on, the compile fails by name instead of running the NaN path.
"""

from __future__ import annotations

import re

import tvm
from tvm import tirx

SLIDING_PREFILL_SYMBOL = "batch_prefill_paged_kv_cpu_sliding_window"
_ROW_MAX_INIT = re.compile(r"^(?P<indent>\s*)m_val\[0\] = (?P<value>T\.float32\(-?[0-9.e+]+\))$")


class SlidingWindowKernelError(RuntimeError):
    """TVM's sliding-window prefill kernel is not the one this repair knows."""


def _repaired_script(script: str) -> str:
    lines = []
    anchors = 0
    for line in script.splitlines():
        lines.append(line)
        match = _ROW_MAX_INIT.match(line)
        if match:
            lines.append(f"{match.group('indent')}new_m[0] = {match.group('value')}")
            anchors += 1
    if anchors != 1:
        raise SlidingWindowKernelError(
            f"{SLIDING_PREFILL_SYMBOL} has {anchors} row-maximum initialisations where the "
            "repair expects one: this TVM version's kernel is not supported for sliding "
            "windows on CPU"
        )
    return "\n".join(lines)


def repair_sliding_window_prefill(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with its CPU sliding-window prefill kernel repaired (see the module docstring)."""
    for global_var, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc) or func.attrs is None:
            continue
        if func.attrs.get("global_symbol") != SLIDING_PREFILL_SYMBOL:
            continue
        mod[global_var] = tvm.script.from_source(_repaired_script(func.script()))
        return mod
    raise SlidingWindowKernelError(f"the model has no kernel {SLIDING_PREFILL_SYMBOL}")
