"""Route decode-shaped matmuls to dlight's LowBatchGEMV before its tile Matmul rule sees them.

Decode multiplies x [batch_size, 1, k] (batch symbolic) by a weight [n, k]. dlight's rule
list tries `Matmul` first, and it accepts this shape, but its SIMT tiles read the weight at
a fraction of memory bandwidth (measured on the H200, Llama-3.1-8B shape, batch 1: the
down projection at 110 GB/s, the whole step 73 ms). LowBatchGEMV is the schedule built for
a handful of rows against a weight read once. Prefill ([1, seq_len, k]) keeps `Matmul`.
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.target import Target


def _is_decode_shaped(func: tirx.PrimFunc) -> bool:
    """The first input is [symbolic batch, 1, k]."""
    if not func.params:
        return False
    buffer_type = getattr(func.params[0], "ty", None)
    if not hasattr(buffer_type, "shape"):
        return False
    shape = list(buffer_type.shape)
    return (
        len(shape) == 3
        and isinstance(shape[1], tirx.IntImm)
        and int(shape[1]) == 1
        and not isinstance(shape[0], tirx.IntImm)
    )


class DecodeLowBatchGEMV(dl.ScheduleRule):
    """LowBatchGEMV for decode-shaped NT matmuls; declines everything else."""

    def __init__(self) -> None:
        self._rule = dl.gpu.LowBatchGEMV()

    def apply(
        self, func: tirx.PrimFunc, target: Target, tunable: bool
    ) -> s_tir.Schedule | list[s_tir.Schedule] | None:
        if not isinstance(func, tirx.PrimFunc) or not _is_decode_shaped(func):
            return None
        return self._rule.apply(func, target, tunable)
