"""Route decode-shaped matmuls to dlight's GEMV rules before its tile Matmul rule sees them.

Decode multiplies x [batch_size, 1, k] by a weight [n, k]. dlight's rule list tries
`Matmul` first, and it accepts this shape, but its SIMT tiles read the weight at a fraction
of memory bandwidth (measured on the H200, Llama-3.1-8B shape, batch 1: the down projection
at 110 GB/s, the whole step 73 ms). With a symbolic batch the products go to LowBatchGEMV
(a handful of rows against a weight read once: 9.1 ms per step); the static one-row
`decode_single` goes to the plain GEMV rule, the one measured at 93-96 % of copy bandwidth.
Prefill ([1, seq_len, k]) keeps `Matmul`.
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.target import Target


def _decode_rows(func: tirx.PrimFunc) -> str | None:
    """ "one" when the first input is [1, 1, k], "few" for [symbolic batch, 1, k], else None."""
    if not func.params:
        return None
    buffer_type = getattr(func.params[0], "ty", None)
    if not hasattr(buffer_type, "shape"):
        return None
    shape = list(buffer_type.shape)
    if len(shape) != 3 or not isinstance(shape[1], tirx.IntImm) or int(shape[1]) != 1:
        return None
    if not isinstance(shape[0], tirx.IntImm):
        return "few"
    return "one" if int(shape[0]) == 1 else None


class DecodeLowBatchGEMV(dl.ScheduleRule):
    """GEMV / LowBatchGEMV for decode-shaped NT matmuls; declines everything else."""

    def __init__(self) -> None:
        self._rules = {"one": dl.gpu.GEMV(), "few": dl.gpu.LowBatchGEMV()}

    def apply(
        self, func: tirx.PrimFunc, target: Target, tunable: bool
    ) -> s_tir.Schedule | list[s_tir.Schedule] | None:
        if not isinstance(func, tirx.PrimFunc):
            return None
        rows = _decode_rows(func)
        if rows is None:
            return None
        return self._rules[rows].apply(func, target, tunable)
