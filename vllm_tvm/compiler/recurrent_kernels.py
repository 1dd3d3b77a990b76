"""The recurrent-layer kernels of one target, as a model definition asks for them.

Why here: model definitions take kernels through `model_defs.recurrent_kernels.RecurrentKernels`
(they never import schedules); this binds the schedules' builders to a target's loop layout
(GPU thread blocks or CPU worker tasks).
"""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.target import Target

from vllm_tvm.schedules.causal_conv1d import causal_conv1d
from vllm_tvm.schedules.gated_delta_rule import delta_rule_chunked, delta_rule_step


class TargetRecurrentKernels:
    """`RecurrentKernels` for `target` (llvm: CPU layout; anything else: GPU layout)."""

    def __init__(self, target: Target) -> None:
        self.gpu = target.kind.name != "llvm"

    def delta_rule_chunked(
        self, heads_k: int, heads_v: int, k_dim: int, v_dim: int
    ) -> tirx.PrimFunc:
        return delta_rule_chunked(heads_k, heads_v, k_dim, v_dim, self.gpu)

    def delta_rule_step(self, heads_k: int, heads_v: int, k_dim: int, v_dim: int) -> tirx.PrimFunc:
        return delta_rule_step(heads_k, heads_v, k_dim, v_dim, self.gpu)

    def causal_conv1d(self, channels: int, kernel_size: int) -> tirx.PrimFunc:
        return causal_conv1d(channels, kernel_size, self.gpu)


def build_options(recurrent: bool, target: Target) -> dict[str, Any]:
    """What a family's `build_model` takes beyond config, dtype and target: the kernels of a
    family with recurrent layers (`ModelFamily.recurrent`), else nothing."""
    return {"kernels": TargetRecurrentKernels(target)} if recurrent else {}
