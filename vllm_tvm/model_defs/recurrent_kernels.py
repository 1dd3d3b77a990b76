"""The kernels a recurrent (Gated DeltaNet) layer calls, as an interface.

Why an interface: the delta rule and the causal conv are TIR kernels with a target-specific
loop layout (schedules/gated_delta_rule.py, schedules/causal_conv1d.py), and a model
definition never imports schedules (tests/test_layering.py). The compiler hands a model an
object with these methods, built for its target; the layer only knows their signatures
(documented on the kernels).
"""

from __future__ import annotations

from typing import Protocol

from tvm import tirx


class RecurrentKernels(Protocol):
    """PrimFunc builders for one target (fp32 tensors; each sequence's state lives in a
    pool at its slot and is updated in place: the PrimFuncs take the pool as an argument)."""

    def delta_rule_chunked(
        self, heads_k: int, heads_v: int, k_dim: int, v_dim: int
    ) -> tirx.PrimFunc:
        """Ragged prefill: (q, k, v, g, beta, seq_starts, slots, states) -> out."""
        ...

    def delta_rule_step(self, heads_k: int, heads_v: int, k_dim: int, v_dim: int) -> tirx.PrimFunc:
        """One token a sequence: (q, k, v, g, beta, slots, states) -> out."""
        ...

    def causal_conv1d(self, channels: int, kernel_size: int) -> tirx.PrimFunc:
        """(x, weight [channels, kernel_size], seq_starts, slots, states) -> silu(conv)."""
        ...
